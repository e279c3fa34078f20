"""Which project roles an identity provider's claim grants: ``FACTORY_OIDC_ROLE_MAP``.

The map is JSON: each value of the role claim (a group's name) maps to one grant or a list
of them, ``{"factory-managers": {"project": "FM", "role": "manager"}, "factory-devs":
[{"project": "FM", "role": "reviewer"}, {"project": "OT", "role": "agent"}]}``. It is read
once, by the settings, before the apps load: this module imports no model, so a map that
cannot be right stops the site at start with what is wrong and where.
"""

import json
import re

from django.core.exceptions import ImproperlyConfigured

from projects.roles import Role

Grant = tuple[str, str]  # (project slug, role)
SLUG = re.compile(r"^[A-Z][A-Z0-9]{0,11}$")  # Project.slug's validator


def parse_role_map(text: str, *, setting: str = "FACTORY_OIDC_ROLE_MAP") -> dict[str, list[Grant]]:
    """``{claim value: [(slug, role), …]}`` from the map's JSON; empty text is no map.

    Raises ``ImproperlyConfigured`` naming the setting, the claim value and the fault.
    Whether each project exists is not known before the database is: a grant to a project
    that does not exist is skipped at sign-in, with a warning in the log.
    """
    if not text.strip():
        return {}
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{setting} is not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ImproperlyConfigured(
            f'{setting} must be a JSON object, {{"group": {{"project": "FM", "role": "manager"}}}}'
        )
    parsed = {}
    for value, grants in raw.items():
        if not value:
            raise ImproperlyConfigured(f"{setting}: a claim value may not be empty")
        grants = [grants] if isinstance(grants, dict) else grants
        if not isinstance(grants, list) or not grants:
            raise ImproperlyConfigured(
                f"{setting}[{value!r}] must be one grant or a non-empty list of grants, "
                'each {"project": "FM", "role": "manager"}'
            )
        parsed[value] = [_grant(setting, value, grant) for grant in grants]
    return parsed


def _grant(setting: str, value: str, grant) -> Grant:
    if not isinstance(grant, dict) or set(grant) != {"project", "role"}:
        raise ImproperlyConfigured(
            f'{setting}[{value!r}]: each grant is {{"project": "FM", "role": "manager"}}, '
            f"exactly those two keys; got {json.dumps(grant)}"
        )
    slug, role = grant["project"], grant["role"]
    if not isinstance(slug, str) or not SLUG.match(slug):
        raise ImproperlyConfigured(
            f"{setting}[{value!r}]: project {json.dumps(slug)} is not a project's key prefix "
            "(1-12 capital letters or digits, starting with a letter)"
        )
    if role not in Role.values:
        raise ImproperlyConfigured(
            f"{setting}[{value!r}]: role {json.dumps(role)} is not one of {', '.join(Role.values)}"
        )
    return slug, role


def claim_values(claims: dict, claim: str) -> set[str]:
    """The values of ``claim`` in ``claims``: a list of strings, or one string."""
    found = claims.get(claim)
    if isinstance(found, str):
        return {found}
    if isinstance(found, list):
        return {item for item in found if isinstance(item, str)}
    return set()


def granted(role_map: dict[str, list[Grant]], values: set[str]) -> set[Grant]:
    """Every (slug, role) that ``values`` grant."""
    return {grant for value in values for grant in role_map.get(value, ())}


def managed(role_map: dict[str, list[Grant]]) -> set[Grant]:
    """Every (slug, role) the map can grant: the identity provider owns these."""
    return {grant for grants in role_map.values() for grant in grants}
