"""Every write to projects and memberships, and the checks every service shares.

Creating a project, editing it (its gate policy included) and granting or revoking a
role are each recorded as an ``Event``, so the audit trail says who could do what, and
which gates applied, at any moment. A single sign-on finds or makes its user here
(``identity_sign_in``) and brings its mapped roles up to date (``memberships_sync``); which
provider account signs in as which user is changed only through ``identity_link`` and
``identity_unlink``, each an Event too.
"""

import logging
import re
from decimal import Decimal

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q

from projects import claims, hosts
from projects.claims import Grant
from projects.errors import Conflict, PermissionDenied
from projects.models import Event, Identity, Membership, Project
from projects.numbers import clean_budget
from projects.policy import clean_policy, declaring
from projects.prices import clean_prices
from projects.roles import Role, forget_roles, has_role
from projects.verify import (
    check_mode_change,
    clean_branch,
    clean_landing,
    clean_repository_url,
    clean_verify,
    local_path,
    same_local_repository,
)

logger = logging.getLogger(__name__)
User = get_user_model()


def project_create(
    *,
    slug: str,
    name: str,
    repository_url: str = "",
    default_branch: str = "main",
    verify: dict | None = None,
    max_attempts: int | None = None,
    gate_policy: dict | None = None,
    actor=None,
) -> Project:
    """Create a project; ``slug`` becomes the prefix of all its keys. Recorded as an Event."""
    project = Project(
        slug=slug,
        name=name,
        repository_url=clean_repository_url(repository_url),
        default_branch=clean_branch(default_branch),
        verify=clean_verify(verify),
        max_attempts=max_attempts or settings.FACTORY_MAX_ATTEMPTS_DEFAULT,
    )
    if gate_policy is not None:
        project.gate_policy = clean_policy(gate_policy)
    check_runner_ready(project)
    project.full_clean()
    with transaction.atomic():
        check_repository_unshared(project)
        project.save()
        Event.record(
            project,
            actor=actor,
            transition="create",
            from_state="",
            to_state="",
            extra={"gate_policy": project.gate_policy},
        )
    return project


PROJECT_EDITABLE_FIELDS = {
    "name",
    "repository_url",
    "default_branch",
    "verify",
    "max_attempts",
    "gate_policy",
    "landing",
    "code_host",
    "claim_avoid_overlap",
    "budget_usd",
    "prices",
}
# What Project.budget_usd holds: 12 digits, 2 of them cents.
PROJECT_BUDGET_DIGITS = 10
CLEANERS = {
    "gate_policy": clean_policy,
    "repository_url": clean_repository_url,
    "default_branch": clean_branch,
    "verify": clean_verify,
    "landing": clean_landing,
    "code_host": hosts.clean_code_host,
    "claim_avoid_overlap": lambda value: _clean_switch(value, "claim_avoid_overlap"),
    "budget_usd": lambda value: clean_budget(value, "budget_usd", digits=PROJECT_BUDGET_DIGITS),
    "prices": clean_prices,
}


def _clean_switch(value, name: str):
    if value is not None and not isinstance(value, bool):
        raise ValidationError({name: "true, false, or null for the default"})
    return value


def check_runner_ready(project: Project) -> None:
    """Refuse (409 ``runner_unconfigured``) a policy with the runner when it has nothing to run."""
    measuring = declaring(project.gate_policy, "measures_repository")
    if not measuring:
        return
    missing = [
        what
        for what, present in (
            ("repository_url (the repository to fetch from)", project.repository_url),
            ("verify (the test command and its JUnit path)", project.verify),
        )
        if not present
    ]
    if missing:
        raise Conflict(
            f"the {measuring[0]} gate needs {' and '.join(missing)}; set them with the policy or first",
            code="runner_unconfigured",
        )


def check_repository_unshared(project: Project) -> None:
    """Refuse (409 ``repository_in_use``) a local repository another project fetches from.

    A local repository is read with the server's own rights, so whoever manages a
    project could otherwise read another project's code and history through the runner
    by naming its directory. A network repository answers to its own access rules.
    """
    if local_path(project.repository_url) is None:
        return
    others = Project.objects.exclude(pk=project.pk).exclude(repository_url="")
    for url in others.values_list("repository_url", flat=True):
        if same_local_repository(url, project.repository_url):
            raise Conflict(
                f"{project.repository_url} is another project's repository; "
                "a local repository serves one project",
                code="repository_in_use",
            )


def check_landing_host(project: Project, *, naming: str = "landing.mode") -> None:
    """Refuse (400 naming ``naming``) landing ``pull_request`` without a GitHub code host:
    the lander lands through the task's pull request there (ADR 0041)."""
    if project.lands_through_host and project.code_host.get("provider", "none") != "github":
        raise ValidationError(
            {
                naming: "landing mode pull_request lands through the task's pull request on "
                'the code host: it needs code_host.provider "github"'
            }
        )


def check_landing_ready(project: Project) -> None:
    """Refuse (409 ``landing_unconfigured``) landing ``push`` or ``pull_request`` without a
    repository to push to and the runner to verify the merged tree: the queue lands only
    what it has tested."""
    if not project.lands:
        return
    missing = [
        what
        for what, present in (
            ("repository_url (the repository to land on)", project.repository_url),
            (
                "the runner in the gate policy (it verifies the merged tree)",
                declaring(project.gate_policy, "measures_repository") and project.verify,
            ),
        )
        if not present
    ]
    if missing:
        raise Conflict(
            f"landing mode {project.landing_settings['mode']} needs {' and '.join(missing)}",
            code="landing_unconfigured",
        )


def check_code_host_variables(code_host: dict) -> None:
    """Refuse (409 ``code_host_unconfigured``) a code host whose credentials this server
    does not hold, naming the variables the operator must set."""
    if code_host.get("provider", "none") == "none":
        return
    unset = hosts.unset_variables(code_host)
    if unset:
        raise Conflict(
            f"this server does not set {', '.join(unset)}; the operator sets the variables a "
            "code host's credentials are named by",
            code="code_host_unconfigured",
        )


def check_code_host_reachable(code_host: dict) -> None:
    """Reach the host with a new code host's credentials before anything is saved: the
    registered check (``hosts.reach``) names each permission they lack (409
    ``code_host_permissions``), or says why the host could not be asked (503)."""
    if code_host.get("provider", "none") == "none":
        return
    check_code_host_variables(code_host)
    hosts.reach(code_host)


def check_code_host_ready(project: Project) -> None:
    """Refuse (409) a code host whose credentials this server does not hold
    (``code_host_unconfigured``, naming the variables the operator must set) or whose
    repository another project follows (``repository_in_use``)."""
    code_host = project.code_host
    if code_host.get("provider", "none") == "none":
        return
    check_code_host_variables(code_host)
    followed = (
        Project.objects.exclude(pk=project.pk)
        .filter(code_host__provider=code_host["provider"], code_host__api_url=code_host["api_url"])
        .filter(code_host__repository__iexact=code_host["repository"])
    )
    if followed.exists():
        raise Conflict(
            f"{code_host['repository']} is another project's repository on "
            f"{code_host['api_url']}; a repository on a code host serves one project",
            code="repository_in_use",
        )


def project_update(*, project: Project, actor, **changes) -> Project:
    """Change a project's name, repository, runner settings, attempt budget, monthly
    ``budget_usd`` (null: no limit), gate policy or code host.

    A new code host is checked against the host itself before anything is written
    (``check_code_host_reachable``): a refusal there saves nothing, not even the other
    fields of the same call.

    Managers only. The gate policy is checked against the registered gates, the
    repository and ``verify`` block as ``projects.verify`` says, and a policy with the
    runner needs both. The change is recorded as an Event naming the fields (with the
    new policy and verify block), so the audit trail says which rules applied when.
    """
    unknown = set(changes) - PROJECT_EDITABLE_FIELDS
    if unknown:
        raise ValidationError({name: "this field cannot be changed" for name in sorted(unknown)})
    require_role(actor, project.pk, Role.MANAGER)
    for name, clean in CLEANERS.items():
        if name in changes:
            changes[name] = clean(changes[name])
    if "code_host" in changes and changes["code_host"] != project.code_host:
        # The host is asked outside the transaction: no row stays locked while it answers.
        check_code_host_reachable(changes["code_host"])
    check_landing_target(project, changes)
    with transaction.atomic():
        project = Project.objects.select_for_update(no_key=True, of=("self",)).get(pk=project.pk)
        changes = {k: v for k, v in changes.items() if getattr(project, k) != v}
        if "landing" in changes:
            check_mode_change(
                project.pk, project.landing_settings["mode"], changes["landing"]["mode"]
            )
        for name, value in changes.items():
            setattr(project, name, value)
        check_runner_ready(project)
        check_landing_host(project, naming=_naming(changes))
        check_landing_ready(project)
        if "repository_url" in changes:
            check_repository_unshared(project)
        if "code_host" in changes:
            check_code_host_ready(project)
        project.full_clean(validate_constraints=False)
        try:
            with transaction.atomic():
                project.save(update_fields=list(changes))
        except IntegrityError as exc:
            # Two projects took the same repository at once: the constraint kept one.
            raise Conflict(
                "that repository on that code host was just taken by another project",
                code="repository_in_use",
            ) from exc
        if changes:
            Event.record(
                project,
                actor=actor,
                transition="edit",
                from_state="",
                to_state="",
                extra={
                    "fields": sorted(changes),
                    **{
                        name: changes[name]
                        for name in ("gate_policy", "verify", "landing", "code_host", "prices")
                        if name in changes
                    },
                    **(
                        {"budget_usd": _text_or_none(changes["budget_usd"])}
                        if "budget_usd" in changes
                        else {}
                    ),
                },
            )
    return project


def _naming(changes: dict) -> str:
    """The field a refusal of landing through the host names: the one the call changes."""
    return "landing.mode" if "landing" in changes or "code_host" not in changes else "code_host"


def check_landing_target(project: Project, changes: dict) -> None:
    """Before a change that leaves the project landing through pull requests (its landing
    block, code host or default branch) is saved, ask the host whether the target can be
    landed on that way (``hosts.check_target``: strict protection, no merge queue yet). Run
    outside the transaction, on the project as it would be; the same rules are checked
    again on the locked row."""
    if not {"landing", "code_host", "default_branch"} & set(changes):
        return
    would = Project(
        pk=project.pk,
        landing=changes.get("landing", project.landing),
        code_host=changes.get("code_host", project.code_host),
        default_branch=changes.get("default_branch", project.default_branch),
    )
    if not would.lands_through_host:
        return
    before = (project.landing_settings, project.code_host, project.landing_target)
    if before == (would.landing_settings, would.code_host, would.landing_target):
        return  # nothing the host was asked about changes
    check_landing_host(would, naming=_naming(changes))
    hosts.check_target(would.code_host, would.landing_target)


def _text_or_none(amount: Decimal | None) -> str | None:
    return None if amount is None else str(amount)


def membership_grant(
    *,
    user,
    project: Project,
    role: str,
    actor=None,
    reason: str = "",
    from_provider: bool = False,
) -> Membership:
    """Give ``user`` a role in ``project``, recorded as an Event; granting twice changes nothing.

    ``from_provider``: single sign-on's role map grants it, so the provider owns the role
    from now on, one given in the site before included (it is a pair the map names).
    """
    if role not in Role.values:
        raise ValidationError({"role": f"choose one of {', '.join(Role.values)}"})
    with transaction.atomic():
        membership, created = Membership.objects.get_or_create(
            user=user, project=project, role=role, defaults={"from_provider": from_provider}
        )
        if created:
            Event.record(
                membership,
                actor=actor,
                transition="grant",
                from_state="",
                to_state="",
                reason=reason,
                extra={"user": user.get_username(), "role": role},
            )
        elif from_provider and not membership.from_provider:
            membership.from_provider = True
            membership.save(update_fields=["from_provider"])
    forget_roles(user)
    return membership


def membership_revoke(*, membership: Membership, actor=None, reason: str = "") -> None:
    """Take a role away, recorded as an Event (who held it stays in the trail)."""
    with transaction.atomic():
        Event.record(
            membership,
            actor=actor,
            transition="revoke",
            from_state="",
            to_state="",
            reason=reason,
            extra={"user": membership.user.get_username(), "role": membership.role},
        )
        membership.delete()
    forget_roles(membership.user)


def identity_sign_in(*, issuer: str, subject: str, username: str, email: str = ""):
    """The user that ``(issuer, subject)`` signs in as, made at its first sign-in.

    A new user has no password and no role, and the first free name among ``username``,
    ``username-2``, ``username-3``… (compared without case, so an existing account is
    never taken over by a provider asserting its name). Two first sign-ins at once make
    one user: the loser of the race reads the winner's. The first sign-in's link is an
    Event by the system.
    """
    identity = Identity.objects.filter(issuer=issuer, subject=subject).select_related("user")
    if found := identity.first():
        return found.user
    base = _username_base(username)
    for suffix in range(1, 1000):
        name = base if suffix == 1 else f"{base[: 150 - 1 - len(str(suffix))]}-{suffix}"
        if User.objects.filter(username__iexact=name).exists():
            continue
        try:
            with transaction.atomic():
                user = User.objects.create_user(name, email=email)  # unusable password
                made = Identity.objects.create(user=user, issuer=issuer, subject=subject)
                _record_link(made, actor=None, transition="link", reason=FIRST_SIGN_IN)
        except IntegrityError:
            if found := identity.first():
                return found.user  # the same person's other first sign-in won
            continue  # someone took the name between the look and the write
        return user
    raise Conflict("no free username for this sign-in", code="username_taken")


FIRST_SIGN_IN = "single sign-on: the first sign-in"
LEFT_WITHOUT_IDENTITY = "single sign-on: no identity signs in as this account any more"


def identity_link(
    *,
    user,
    actor,
    identity: Identity | None = None,
    issuer: str = "",
    subject: str = "",
    reason: str = "",
) -> Identity:
    """Make the provider's account ``(issuer, subject)`` sign in as ``user``, or point
    ``identity`` at ``user`` instead of the account it signs in as; an Event by ``actor``.

    ``actor`` needs the admin's permission to add (a new pair) or change identities, and
    only a superuser may link one to a staff or superuser account or change one that
    signs in as such an account (403 ``superuser_required``): whoever can point an
    identity at an account can sign in as it. The identity's row is locked while its
    current account is read, so a change made meanwhile is judged too. An account that
    no identity signs in as any more keeps no role the provider's map names (they are
    the provider's, and it would never take them back).
    """
    if identity is None:
        _check_identity_rights(actor, "add", wanted=user)
        made = Identity(user=user, issuer=issuer, subject=subject)
        made.full_clean()  # both parts given, not too long, the pair not linked already
        try:
            with transaction.atomic():
                made.save()
                _record_link(made, actor=actor, transition="link", reason=reason)
        except IntegrityError:
            raise ValidationError(
                "Identity with this Issuer and Subject already exists."
            ) from None  # made by a first sign-in between the check and the write
        return made
    with transaction.atomic():
        identity = _lock_identity(identity)
        _check_identity_rights(actor, "change", current=identity.user, wanted=user)
        previous = identity.user
        if previous.pk == user.pk:
            return identity
        identity.user = user
        identity.save(update_fields=["user"])
        _record_link(identity, actor=actor, transition="relink", reason=reason, previous=previous)
        _forget_provider_roles(previous, actor=actor)
    return identity


def identity_unlink(*, identity: Identity, actor, reason: str = "") -> None:
    """Delete ``identity``: the provider's account makes a new user at its next sign-in.

    The same rights as ``identity_link`` (the admin's delete permission; a superuser for an
    identity that signs in as a staff or superuser account); an Event by ``actor``, and
    the account left without an identity keeps no role the provider's map names.
    """
    with transaction.atomic():
        identity = _lock_identity(identity)
        _check_identity_rights(actor, "delete", current=identity.user)
        _record_link(identity, actor=actor, transition="unlink", reason=reason)
        identity.delete()
        _forget_provider_roles(identity.user, actor=actor)


def _lock_identity(identity: Identity) -> Identity:
    """``identity`` read again with its row locked; its ``user``, loaded after, is the
    account it signs in as now, not the one the caller read, so a change committed
    meanwhile is judged too."""
    # No join in the locking query: PostgreSQL re-checks a locked row that changed meanwhile
    # against the joined row it read first, and would drop an identity repointed since.
    return Identity.objects.select_for_update(no_key=True, of=("self",)).get(pk=identity.pk)


def _check_identity_rights(actor, action: str, *, current=None, wanted=None) -> None:
    """Refuse (403) unless ``actor`` may ``action`` an identity that signs in as ``current``
    so that it signs in as ``wanted``: the admin's permission, and a superuser wherever a
    staff or superuser account is either."""
    if actor is None or not actor.is_active or not actor.has_perm(f"projects.{action}_identity"):
        raise PermissionDenied(f"this needs the permission to {action} identities")
    if actor.is_superuser:
        return
    if current is not None and _is_staff(current):
        raise PermissionDenied(
            "only a superuser may change or delete an identity that signs in as a staff "
            "or superuser account",
            code="superuser_required",
        )
    if wanted is not None and _is_staff(wanted):
        raise PermissionDenied(
            "only a superuser may link an identity to a staff or superuser account",
            code="superuser_required",
        )


def _is_staff(user) -> bool:
    return user.is_staff or user.is_superuser


def _record_link(identity: Identity, *, actor, transition: str, reason: str, previous=None):
    Event.record(
        identity,
        actor=actor,
        transition=transition,
        from_state="",
        to_state="",
        reason=reason,
        extra={
            "issuer": identity.issuer,
            "subject": identity.subject,
            "user": identity.user.get_username(),
            "user_id": identity.user_id,
            **(
                {"from_user": previous.get_username(), "from_user_id": previous.pk}
                if previous is not None
                else {}
            ),
        },
    )


def _forget_provider_roles(user, *, actor) -> None:
    if user.identities.exists():
        return  # another identity still signs in as it, and its sign-ins keep them right
    memberships_sync(
        user=user,
        grants=set(),
        managed=claims.managed(settings.FACTORY_OIDC_ROLE_MAP),
        reason=LEFT_WITHOUT_IDENTITY,
        actor=actor,
    )


def _username_base(hint: str) -> str:
    """``hint`` cut to what Django's usernames allow (letters, digits and ``@.+-_``)."""
    cleaned = re.sub(r"[^\w.@+-]", "", hint, flags=re.ASCII)[:150]
    return cleaned or "user"


def memberships_sync(
    *, user, grants: set[Grant], managed: set[Grant], reason: str, actor=None
) -> None:
    """Make ``user``'s roles among the ``managed`` (slug, role) pairs exactly ``grants``.

    What is missing is granted and what is no longer granted is revoked, each recorded as
    an Event by ``actor`` (the system when None) with ``reason``. A role the provider
    granted earlier (``Membership.from_provider``) is revoked too when ``grants`` lacks it,
    even if the map no longer names its pair: narrowing the map takes roles back. Other
    roles outside ``managed`` are given in the site and stay. A grant to a project that
    does not exist is skipped, with a warning.
    """
    slugs = {slug for slug, _ in managed | grants}
    projects = {p.slug: p for p in Project.objects.filter(slug__in=slugs)}
    with transaction.atomic():
        held = (
            Membership.objects.filter(user=user)
            .filter(Q(project__slug__in=slugs) | Q(from_provider=True))
            .select_related("project")
        )
        for membership in held:
            pair = (membership.project.slug, membership.role)
            owned = pair in managed or membership.from_provider
            if owned and pair not in grants:
                membership_revoke(membership=membership, actor=actor, reason=reason)
        for slug, role in sorted(grants):
            if slug not in projects:
                logger.warning("sign-in grants a role in project %s, which does not exist", slug)
                continue
            membership_grant(
                user=user,
                project=projects[slug],
                role=role,
                actor=actor,
                reason=reason,
                from_provider=True,
            )


def check_storable(value, field: str) -> None:
    """Refuse (400) JSON that no database stores faithfully: NUL characters, which
    PostgreSQL's jsonb rejects, and lone surrogates, which are not UTF-8 at all."""

    def walk(item):
        if isinstance(item, str):
            if "\x00" in item:
                raise ValidationError({field: "text may not contain NUL characters"})
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise ValidationError(
                    {field: "text must be valid Unicode (a lone surrogate was sent)"}
                ) from None
        elif isinstance(item, dict):
            for key, inner in item.items():
                walk(key)
                walk(inner)
        elif isinstance(item, list | tuple):
            for inner in item:
                walk(inner)

    walk(value)


def require_role(actor, project_id: int, *roles: str) -> None:
    """Refuse (403) unless ``actor`` holds one of ``roles`` in the project."""
    if not has_role(actor, project_id, *roles):
        names = " or ".join(roles)
        raise PermissionDenied(f"this needs the {names} role in the project")
