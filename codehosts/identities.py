"""Who is who (issue 33, ADR 0040): which person here a code host's account is.

An account is known by the host's number for it, never by its login alone: a login can be
renamed and then taken by someone else, the number stays with the person. A manager links
an account of the project's host to a member (``host_account_link``) or takes the link
back (``host_account_unlink``), each an Event; with ``FACTORY_CODE_HOST_SSO_ISSUER`` set, a
member who signs in with that issuer's identity whose subject is the account's number is
that account too. ``user_for`` is the one lookup everything uses; an account it does not
know is shown as its login on the host (``shown``), never as anyone here.
"""

import re

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from codehosts.models import HostAccount
from codehosts.providers import (
    Forbidden,
    HostError,
    NotFound,
    RateLimited,
    Unavailable,
    Unconfigured,
    provider_for,
)
from codehosts.services import HostUnavailable
from projects.errors import Conflict
from projects.errors import NotFound as Missing
from projects.models import Event, Identity, Membership, Project
from projects.roles import Role
from projects.services import require_role

User = get_user_model()

# GitHub's logins: 1 to 39 characters, letters, digits and single hyphens, neither first
# nor last. Checked before the host is asked, so nothing else reaches its URL. The API's
# schema states the same pattern (no lookahead: schema tools read it too).
LOGIN_PATTERN = r"^[A-Za-z0-9]+(-[A-Za-z0-9]+)*$"
LOGIN_MAX = 39
LOGIN = re.compile(LOGIN_PATTERN)
HOSTS = {"github": "GitHub"}


def clean_login(login) -> str:
    """``login`` if it is a GitHub login, else a ``ValidationError`` naming ``login``."""
    if not isinstance(login, str) or len(login) > LOGIN_MAX or not LOGIN.fullmatch(login):
        raise ValidationError(
            {"login": ["a GitHub login: 1 to 39 letters, digits or single hyphens"]}
        )
    return login


def host_account_link(*, actor, project: Project, login: str, user) -> HostAccount:
    """A manager of ``project`` says the host's account ``login`` is ``user``, a member.

    The host is asked for the account's number, which the link keeps (a rename keeps it
    too); the login is kept as last seen. 403 for anyone but a manager of the project; 400
    naming ``login`` for a login that is not GitHub's shape or no account on the host, and
    ``user`` for anyone not a member of the project (unknown or not); 409
    ``host_account_linked`` when the account is someone else's here already (linked, or by
    single sign-on); 409 ``code_host_unconfigured`` for a project without a usable host,
    503 ``code_host_unavailable`` when the host cannot be asked. The same link again
    changes nothing but the login; a new one is an Event ``link``.
    """
    require_role(actor, project.pk, Role.MANAGER)
    login = clean_login(login)
    if user is None or not Membership.objects.filter(project=project, user=user).exists():
        raise ValidationError({"user": ["a member of this project"]})
    found = _ask_host(project, login)
    linked_sso = _sso_user(project, found.id)
    if linked_sso is not None and linked_sso.pk != user.pk:
        raise _linked(found.login, linked_sso, "through single sign-on")
    try:
        with transaction.atomic():
            # Locked: two managers linking the same account at once do not both win.
            account = (
                HostAccount.objects.select_for_update(no_key=True, of=("self",))
                .filter(project=project, host_id=found.id)
                .select_related("user")
                .first()
            )
            if account is not None:
                if account.user_id != user.pk:
                    raise _linked(found.login, account.user, "by a manager")
                if account.login != found.login:
                    account.login = found.login
                    account.save(update_fields=["login"])
                return account
            account = HostAccount.objects.create(
                project=project, host_id=found.id, login=found.login, user=user, linked_by=actor
            )
            _record(account, actor=actor, transition="link")
    except IntegrityError:
        # Another request linked it between our read and our write (no row to lock yet).
        account = HostAccount.objects.select_related("user").get(project=project, host_id=found.id)
        if account.user_id != user.pk:
            raise _linked(found.login, account.user, "by a manager") from None
    return account


def host_account_unlink(*, actor, project: Project, host_id: int) -> None:
    """A manager of ``project`` takes back the link of the host's account ``host_id``: the
    account is shown as its login again. 403 for anyone but a manager, 404 for an account
    not linked in the project (one known through single sign-on is the provider's to
    change). An Event ``unlink``."""
    require_role(actor, project.pk, Role.MANAGER)
    with transaction.atomic():
        account = (
            HostAccount.objects.select_for_update(no_key=True, of=("self",))
            .filter(project=project, host_id=host_id)
            .select_related("user")
            .first()
        )
        if account is None:
            raise Missing(f"no account {host_id} on the host is linked in this project")
        _record(account, actor=actor, transition="unlink")
        account.delete()


def user_for(project: Project, *, host_id: int | None = None, login: str | None = None):
    """The member of ``project`` the host's account is, or None.

    By ``host_id`` (prefer it): a single sign-on identity of the operator's
    ``FACTORY_CODE_HOST_SSO_ISSUER`` whose subject is the number, then a manager's link. By
    ``login`` alone (an answer that names no number): the manager's link whose login, as
    last seen, is that one, and only while one link has it, since a renamed login can be
    someone else's now. Either way the user is a member of the project now: someone who
    left it is shown as the host's login.
    """
    members = User.objects.filter(memberships__project=project, is_active=True)
    if host_id is not None:
        if (found := _sso_user(project, host_id)) is not None:
            return found
        return members.filter(
            host_accounts__project=project, host_accounts__host_id=host_id
        ).first()
    if not login:
        return None
    found = list(
        members.filter(
            host_accounts__project=project, host_accounts__login__iexact=login
        ).distinct()[:2]
    )
    return found[0] if len(found) == 1 else None


def shown(project: Project, login: str, *, host_id: int | None = None) -> str:
    """How a page names the host's account: the member's name when ``user_for`` knows it,
    else the login marked as the host's (``octocat on GitHub``), never as anyone here."""
    if not login and host_id is None:
        return f"someone on {_host_name(project)}"
    user = user_for(project, host_id=host_id, login=login)
    if user is None:
        return f"{login} on {_host_name(project)}"
    return user.get_full_name() or user.get_username()


def _host_name(project: Project) -> str:
    provider = (project.code_host or {}).get("provider", "none")
    return HOSTS.get(provider, "the code host")


def _sso_user(project: Project, host_id: int):
    issuer = settings.FACTORY_CODE_HOST_SSO_ISSUER
    if not issuer:
        return None
    identity = (
        Identity.objects.filter(
            issuer=issuer,
            subject=str(host_id),
            user__is_active=True,
            user__memberships__project=project,
        )
        .select_related("user")
        .first()
    )
    return identity.user if identity else None


def _ask_host(project: Project, login: str):
    """The host's account named ``login``; a web request waits, so one try, no waiting."""
    try:
        return provider_for(project, retries=0, max_wait=0).user(login)
    except NotFound:
        raise ValidationError({"login": [f"no account {login} on the code host"]}) from None
    except Unconfigured as exc:
        raise Conflict(exc.detail, code="code_host_unconfigured") from None
    except Forbidden as exc:
        raise Conflict(
            f"the code host refused to name the account: {exc.detail}",
            code="code_host_permissions",
            extra={"missing": list(exc.missing)},
        ) from None
    except (Unavailable, RateLimited, HostError) as exc:
        raise HostUnavailable(
            f"the code host could not be asked ({exc.detail}); nothing was linked: try again"
        ) from None


def _linked(login: str, user, how: str) -> Conflict:
    return Conflict(
        f"{login} is already {user.get_username()}'s here ({how}): unlink it first",
        code="host_account_linked",
    )


def _record(account: HostAccount, *, actor, transition: str) -> None:
    Event.record(
        account,
        actor=actor,
        transition=transition,
        from_state="",
        to_state="",
        extra={
            "host_id": account.host_id,
            "login": account.login,
            "user": account.user.get_username(),
            "user_id": account.user_id,
        },
    )
