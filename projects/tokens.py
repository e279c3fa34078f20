"""API tokens: the one place they are issued and revoked (the tokens page and
``manage.py issue_token`` both call here), so the bounds are written once (ADR 0006)."""

from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from knox.models import AuthToken
from knox.settings import knox_settings

from projects.roles import Role, roles_by_project

# Least to most privileged: a user's token bound is that of the highest role they hold.
ROLE_ORDER = [Role.AGENT, Role.VERIFIER, Role.REVIEWER, Role.MANAGER]


def token_role(user) -> str:
    """The role whose bound applies to ``user``'s tokens: ``superuser``, else their most
    privileged project role in any project; a user with no role is bounded as an agent."""
    if user.is_superuser:
        return "superuser"
    held = set().union(*roles_by_project(user).values())
    return next((role for role in reversed(ROLE_ORDER) if role in held), Role.AGENT).value


def token_max_days(user) -> int:
    """The longest lifetime, in days, ``user`` may give a token."""
    return settings.FACTORY_TOKEN_MAX_DAYS[token_role(user)]


def token_default_days(user) -> int:
    """The lifetime a token gets when none is asked for: FACTORY_TOKEN_TTL_DAYS, within the bound."""
    return min(knox_settings.TOKEN_TTL.days, token_max_days(user))


def live_tokens(user):
    return AuthToken.objects.filter(user=user).filter(
        Q(expiry__isnull=True) | Q(expiry__gt=timezone.now())
    )


def token_issue(*, user, days: int | None = None) -> tuple[AuthToken, str]:
    """Issue an API token for ``user``; returns the row and the token, which exists only here.

    Guarantees: the token expires, within ``token_max_days(user)`` (``days`` outside
    1 … that bound is a ValidationError on ``days``); ``user`` then holds at most
    FACTORY_TOKEN_MAX_PER_USER unexpired tokens (else a ValidationError naming the cap).
    A refusal creates nothing. Only the token's hash is stored.
    """
    role, bound = token_role(user), token_max_days(user)
    days = token_default_days(user) if days is None else days
    if not 1 <= days <= bound:
        raise ValidationError(
            {
                "days": f"{user.get_username()}'s tokens last 1 to {bound} days (the {role} "
                f"bound, FACTORY_TOKEN_MAX_DAYS_{role.upper()}); none lasts forever"
            },
            code="token_lifetime",
        )
    cap = settings.FACTORY_TOKEN_MAX_PER_USER
    with transaction.atomic():
        # Lock the user's row so two issues at once cannot both see room under the cap.
        get_user_model().objects.select_for_update(no_key=True, of=("self",)).filter(
            pk=user.pk
        ).first()
        held = live_tokens(user).count()
        if held >= cap:
            raise ValidationError(
                f"{user.get_username()} already has {held} unexpired tokens, the most allowed "
                f"(FACTORY_TOKEN_MAX_PER_USER={cap}); revoke one first, on the API tokens "
                "page (/tokens/) or in the admin",
                code="token_cap",
            )
        return AuthToken.objects.create(user=user, expiry=timedelta(days=days))


def token_revoke(*, user, token_key: str) -> bool:
    """Delete ``user``'s token that starts with ``token_key``; False when there is none."""
    deleted, _ = AuthToken.objects.filter(user=user, token_key=token_key).delete()
    return bool(deleted)


def tokens_delete_expired() -> int:
    """Delete every expired token (the reconciler's sweep; knox's per-request one is off)."""
    return AuthToken.objects.filter(expiry__lt=timezone.now()).delete()[0]
