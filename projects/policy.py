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
