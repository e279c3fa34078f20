"""A project's gate policy: which gates run on each submission, with what parameters.

The gates themselves live in ``evidence.gates``; this site knows them only by the dotted
paths in ``settings.FACTORY_GATES`` and ``FACTORY_EXTRA_GATES``, loaded here (a plugin
registry), so a project's policy can be checked without the kernel importing the app
that defines the gates.
"""

from functools import cache

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.module_loading import import_string


@cache
def registry() -> dict:
    """The gates known to this site: ``FACTORY_GATES`` plus ``FACTORY_EXTRA_GATES``."""
    gates = {}
    for name, path in {**settings.FACTORY_GATES, **settings.FACTORY_EXTRA_GATES}.items():
        gate = import_string(path)()
        gate.name = name
        gates[name] = gate
    return gates


def clean_policy(policy) -> dict:
    """Validate a gate policy ``{gate name: {params}}`` against the registry."""
    if not isinstance(policy, dict):
        raise ValidationError({"gate_policy": 'must be an object: {"gate name": {parameters}}'})
    gates, cleaned, errors = registry(), {}, []
    for name, params in policy.items():
        if name not in gates:
            errors.append(f"unknown gate {name!r} (known: {', '.join(sorted(gates))})")
            continue
        try:
            cleaned[name] = gates[name].clean_params(params)
        except ValidationError as exc:
            errors.extend(exc.messages)
    if errors:
        raise ValidationError({"gate_policy": errors})
    return cleaned


def declares(name: str, attribute: str) -> bool:
    """Whether the gate registered as ``name`` declares ``attribute`` (``goes_first``,
    ``needs_commit``, ``measures_repository``: class attributes of ``evidence.gates.Gate``).

    Others ask a gate what it is, never what it is called: the runner is the gate that
    declares it measures the repository, whatever name the site registers it under.
    False for a name the site does not know.
    """
    gate = registry().get(name)
    return gate is not None and bool(getattr(gate, attribute, False))


def declaring(names, attribute: str) -> list[str]:
    """The gates of ``names`` (a policy, or any names) that declare ``attribute``, in order."""
    return [name for name in names or () if declares(name, attribute)]


def measuring_gate():
    """The site's gate that measures the repository itself (the runner), or None."""
    name = next(iter(declaring(registry(), "measures_repository")), None)
    return registry()[name] if name is not None else None


def measuring_gate_name() -> str | None:
    """The name the site registers its measuring gate under (``"runner"``), or None."""
    gate = measuring_gate()
    return gate.name if gate is not None else None
