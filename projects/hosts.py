"""A project's ``code_host``: where its code lives, and the credentials for it, by name.

``{provider: "none"|"github", api_url, repository: "owner/name", token_env | app_id,
installation_id, private_key_env, webhook_secret_env, issues: {label} | null}``
(docs/code-hosts.md). The block holds no secret: a credential is the name of an
environment variable that the operator sets, and every such name starts with
``FACTORY_HOST_``, so a manager can have the site send no other secret anywhere. The API
base must be one the operator lists (``FACTORY_CODE_HOST_URLS``), so a manager cannot point
the site at a server of their own. Each field is checked against one pattern that the
API's schema publishes too (``projects.api``); what depends on the server (a variable
that is not set, a repository another project follows) is a 409 (``projects.services``).
"""

import os
import re
from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import ValidationError

PROVIDERS = ("none", "github")
# GitHub's rules, without look-arounds (the schema's pattern is this one): an owner is 1-39
# letters, digits and hyphens; a repository name up to 100 letters, digits, ".", "_" and
# "-", but not "." or "..".
REPOSITORY_PATTERN = (
    r"^[A-Za-z0-9][A-Za-z0-9-]{0,38}"
    r"/(?:\.?[A-Za-z0-9_-][A-Za-z0-9._-]{0,98}|\.\.[A-Za-z0-9._-]{1,98})$"
)
ENV_PREFIX = "FACTORY_HOST_"
ENV_PATTERN = rf"^{ENV_PREFIX}[A-Z0-9_]{{1,100}}$"
# While a secret is rotated, the old one stays in force under its name with this after it.
PREVIOUS = "_PREVIOUS"
LABEL_MAX = 50  # GitHub's longest label name
LABEL_PATTERN = r"^[^\x00-\x1f\x7f]*[^\s\x00-\x1f\x7f][^\x00-\x1f\x7f]*$"
GITHUB_ID_MAX = 2**53 - 1  # ids are JSON numbers: whole and exact in a double
NONE = {"provider": "none"}
ENV_FIELDS = ("token_env", "private_key_env", "webhook_secret_env")
GITHUB_FIELDS = (
    "provider",
    "api_url",
    "repository",
    "token_env",
    "app_id",
    "installation_id",
    "private_key_env",
    "webhook_secret_env",
    "issues",
)


# What reaches the host when a manager saves a code host: registered by the app that holds
# the host's client (codehosts, at start: ADR 0031), so the kernel never imports it.
_reach: Callable[[dict], None] | None = None


def register_reach(check: Callable[[dict], None]) -> None:
    """Make ``check(code_host)`` the one that reaches the host at save; it raises a
    ``ServiceError`` naming what the host refused or why it could not be reached."""
    global _reach
    _reach = check


def reach(code_host: dict) -> None:
    """Check the block against its host (``register_reach``); with none registered, or
    ``FACTORY_CODE_HOST_CHECK_AT_SAVE`` off, nothing is checked."""
    if _reach is not None and settings.FACTORY_CODE_HOST_CHECK_AT_SAVE:
        _reach(code_host)


# What asks the host whether a target branch can be landed on through pull requests
# (landing.mode pull_request: strict protection, no merge queue yet): registered by
# codehosts at start, as ``_reach`` is (ADR 0031, ADR 0041).
_target_check: Callable[[dict, str], None] | None = None


def register_target_check(check: Callable[[dict, str], None]) -> None:
    """Make ``check(code_host, branch)`` the one that asks the host at save whether the
    site may land on ``branch`` through pull requests; it raises a ``ServiceError`` saying
    why not (the branch's protection, or the host could not be asked)."""
    global _target_check
    _target_check = check


def check_target(code_host: dict, branch: str) -> None:
    """Ask the host about landing on ``branch`` through pull requests
    (``register_target_check``); with none registered, or
    ``FACTORY_CODE_HOST_CHECK_AT_SAVE`` off, nothing is asked."""
    if _target_check is not None and settings.FACTORY_CODE_HOST_CHECK_AT_SAVE:
        _target_check(code_host, branch)


def default_code_host() -> dict:
    return dict(NONE)


def api_urls() -> list[str]:
    """The API bases the operator allows, without a trailing slash."""
    return [url.rstrip("/") for url in settings.FACTORY_CODE_HOST_URLS]


def clean_code_host(value) -> dict:
    """The code host block, or a ValidationError naming each bad field.

    ``None``, ``{}`` and ``{"provider": "none"}`` are no code host: today's behaviour. For
    GitHub, ``api_url`` defaults to the first the operator lists; the credentials are a
    token (``token_env``) or a GitHub App (``app_id``, ``installation_id``,
    ``private_key_env``), never both; ``webhook_secret_env`` names the secret the host
    signs its deliveries with.
    """
    if value in (None, {}):
        return default_code_host()
    if not isinstance(value, dict):
        raise ValidationError({"code_host": 'must be an object: {"provider": "github", …}'})
    provider = value.get("provider", "none")
    if provider not in PROVIDERS:
        raise ValidationError({"code_host.provider": [f"choose one of {', '.join(PROVIDERS)}"]})
    allowed = ("provider",) if provider == "none" else GITHUB_FIELDS
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        why = "no field but provider without a code host" if provider == "none" else "unknown field"
        raise ValidationError({f"code_host.{name}": [why] for name in unknown})
    if provider == "none":
        return default_code_host()
    cleaned = {"api_url": (api_urls() or [""])[0], "issues": None, **value}
    errors = {}
    api_url = cleaned["api_url"]
    if not isinstance(api_url, str) or api_url.rstrip("/") not in api_urls():
        errors["code_host.api_url"] = [
            f"one of the API bases this site's operator allows: {', '.join(api_urls())}"
        ]
    else:
        cleaned["api_url"] = api_url.rstrip("/")
    if not _matches(REPOSITORY_PATTERN, cleaned.get("repository")):
        errors["code_host.repository"] = ["owner/name, as in the repository's address"]
    for name in ENV_FIELDS:
        if name in cleaned and not _matches(ENV_PATTERN, cleaned[name]):
            errors[f"code_host.{name}"] = [
                f"the name of an environment variable starting with {ENV_PREFIX}, in capitals "
                "(the operator sets it; a secret itself is never given here)"
            ]
    app = [name for name in ("app_id", "installation_id", "private_key_env") if name in cleaned]
    if "token_env" in cleaned and app:
        errors["code_host.token_env"] = ["a token or a GitHub App, not both"]
    elif not app and "token_env" not in cleaned:
        errors["code_host.token_env"] = [
            "credentials are needed: token_env, or app_id, installation_id and private_key_env"
        ]
    elif app and len(app) < 3:
        for name in {"app_id", "installation_id", "private_key_env"} - set(app):
            errors[f"code_host.{name}"] = [
                "a GitHub App needs app_id, installation_id and private_key_env"
            ]
    for name in ("app_id", "installation_id"):
        number = cleaned.get(name)
        if name in cleaned and (
            isinstance(number, bool)
            or not isinstance(number, int)
            or not 1 <= number <= GITHUB_ID_MAX
        ):
            errors[f"code_host.{name}"] = [f"a whole number from 1 to {GITHUB_ID_MAX}"]
    if "webhook_secret_env" not in cleaned:
        errors["code_host.webhook_secret_env"] = [
            "the variable holding the secret the host signs its webhook deliveries with"
        ]
    issues = cleaned["issues"]
    if issues is not None and (
        not isinstance(issues, dict)
        or set(issues) != {"label"}
        or not isinstance(issues["label"], str)
        or len(issues["label"]) > LABEL_MAX
        or not re.fullmatch(LABEL_PATTERN, issues["label"])
    ):
        errors["code_host.issues"] = [
            f'null, or {{"label": …}}: the label (up to {LABEL_MAX} characters) of the issues '
            "that become tasks"
        ]
    if errors:
        raise ValidationError(errors)
    return {name: cleaned[name] for name in GITHUB_FIELDS if name in cleaned}


def unset_variables(code_host: dict) -> list[str]:
    """The variables the block names that this process's environment does not set."""
    return [
        code_host[name]
        for name in ENV_FIELDS
        if name in code_host and not os.environ.get(code_host[name], "").strip()
    ]


def secrets(code_host: dict) -> list[str]:
    """The webhook secrets in force: the variable's, and while one is rotated the old one
    in the same name with ``_PREVIOUS`` after it. Never stored, shown or logged."""
    name = code_host.get("webhook_secret_env", "")
    found = [os.environ.get(name, ""), os.environ.get(f"{name}{PREVIOUS}", "")] if name else []
    return [secret for secret in found if secret]


def _matches(pattern: str, value) -> bool:
    return isinstance(value, str) and re.fullmatch(pattern, value) is not None
