"""Who may do what: project roles and the transition permissions built on them.

django-fsm calls a transition's ``permission`` as ``permission(instance, user)``
and wants a bool. A ``Rule`` is such a callable that can also say *why* it
refuses, so the service that fires the transition can answer with a reason.
``user=None`` is the system (a Celery job or the reconciler), which only system
rules admit.
"""

from collections.abc import Callable

from django.db import models

Refusal = tuple[str, str]  # (code, reason)


class Role(models.TextChoices):
    AGENT = "agent", "Agent"
    VERIFIER = "verifier", "Verifier"
    REVIEWER = "reviewer", "Reviewer"
    MANAGER = "manager", "Manager"


# Superusers administer every project, but they never act as an agent or verifier:
# provenance must say who really produced the work and the evidence.
SUPERUSER_ROLES = frozenset({Role.REVIEWER, Role.MANAGER})


def roles_by_project(user) -> dict[int, set[str]]:
    """Every project role of ``user``, loaded once per user object (so once per request)."""
    if user is None or not user.is_authenticated or not user.is_active:
        return {}
    cache = getattr(user, "_factory_roles", None)
    if cache is None:
        cache = {}
        for pid, role in user.memberships.values_list("project_id", "role"):
            cache.setdefault(pid, set()).add(role)
        user._factory_roles = cache
    return cache


def roles_in(user, project_id: int) -> frozenset[str]:
    """The roles ``user`` holds in a project."""
    roles = frozenset(roles_by_project(user).get(project_id, ()))
    return roles | SUPERUSER_ROLES if user is not None and user.is_superuser else roles


def has_role(user, project_id: int, *roles: str) -> bool:
    return bool(roles_in(user, project_id) & set(roles))


def forget_roles(user) -> None:
    """Drop the cached roles (after a membership changes)."""
    for cache in ("_factory_roles", "_factory_slugs"):
        if user is not None and hasattr(user, cache):
            delattr(user, cache)


class Rule:
    """A transition permission that knows its refusal reason."""

    def __init__(self, refusal: Callable[[object, object], Refusal | None], name: str):
        self.refusal = refusal
        self.__name__ = name

    def __call__(self, instance, user) -> bool:
        return self.refusal(instance, user) is None

    def __repr__(self) -> str:
        return f"<Rule {self.__name__}>"


def role_rule(*roles: str) -> Rule:
    """Admit a user holding one of ``roles`` in the instance's project."""

    def refusal(instance, user):
        if user is None:
            return ("permission_denied", "this action needs a person, not the system")
        if not has_role(user, instance.fsm_project_id, *roles):
            names = " or ".join(roles)
            return ("permission_denied", f"this needs the {names} role in the project")
        return None

    return Rule(refusal, f"role:{'|'.join(roles)}")


def either(*rules: Rule, refusal: Refusal) -> Rule:
    """Admit a user whom any of ``rules`` admits; refuse the others with ``refusal``."""

    def check(instance, user):
        return None if any(rule(instance, user) for rule in rules) else refusal

    return Rule(check, "|".join(rule.__name__ for rule in rules))


def _system_refusal(instance, user):
    if user is not None:
        return ("system_only", "this transition is made by the system, not by a person")
    return None


SYSTEM = Rule(_system_refusal, "system")


def _holder_refusal(instance, user):
    if user is None or instance.holder_id != user.pk:
        return ("not_lease_holder", f"only the agent holding {instance} may do this")
    return None


# The agent whose attempt it is (``instance.holder_id``): for an attempt its agent,
# for a task the agent of its current attempt.
HOLDER = Rule(_holder_refusal, "holder")


def _reviewer_refusal(instance, user):
    refused = role_rule(Role.REVIEWER).refusal(instance, user)
    if refused:
        return refused
    if instance.holder_id == user.pk:
        return ("own_work", "you submitted this attempt; another reviewer must judge it")
    return None


# Separation of duties: a reviewer of the project who is not the submitting agent.
REVIEWER_NOT_HOLDER = Rule(_reviewer_refusal, "reviewer_not_holder")
# Managers' transitions: a task's publish or cancel, a spec version's accept, an import's apply.
MANAGER = role_rule(Role.MANAGER)
