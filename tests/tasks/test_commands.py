"""Management commands: create_user and issue_token (seed_demo: tests/demo/test_seed_demo.py)."""

import io
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.utils import timezone
from knox.crypto import hash_token
from knox.models import AuthToken

from projects.models import Membership
from tests.factories import UserFactory

User = get_user_model()


def run(*args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def roles_of(username) -> list[tuple[str, str]]:
    return sorted(
        Membership.objects.filter(user__username=username).values_list("project__slug", "role")
    )


# --- create_user ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_create_user_creates_a_member_and_prints_a_working_password(flow):
    out, _ = run("create_user", "bob", "--role", "agent", "--project", "FM")

    first, second = out.splitlines()
    password = first.removeprefix("Created user bob with password: ")
    assert first.startswith("Created user bob with password: ") and len(password) >= 12
    assert second == "bob is agent in FM"
    assert User.objects.get(username="bob").check_password(password)
    assert roles_of("bob") == [("FM", "agent")]


@pytest.mark.django_db
def test_create_user_uses_the_password_given(flow):
    out, _ = run(
        "create_user", "bob", "--role", "reviewer", "--project", "FM", "--password", "s3cret-pw"
    )

    assert out.splitlines()[0] == "Created user bob with password: s3cret-pw"
    assert User.objects.get(username="bob").check_password("s3cret-pw")


@pytest.mark.django_db
def test_create_user_again_adds_the_role_and_keeps_the_password(flow, other_flow):
    run("create_user", "bob", "--role", "agent", "--project", "FM", "--password", "first-pw")

    out, _ = run("create_user", "bob", "--role", "verifier", "--project", "FM")
    run("create_user", "bob", "--role", "verifier", "--project", "OT")
    run("create_user", "bob", "--role", "verifier", "--project", "OT")

    assert out == "bob is verifier in FM\n"
    assert roles_of("bob") == [("FM", "agent"), ("FM", "verifier"), ("OT", "verifier")]
    assert User.objects.filter(username="bob").count() == 1
    assert User.objects.get(username="bob").check_password("first-pw")


@pytest.mark.django_db
def test_create_user_refuses_an_unknown_project(flow):
    with pytest.raises(CommandError, match="no project with slug 'XX'"):
        run("create_user", "bob", "--role", "agent", "--project", "XX")

    assert not User.objects.filter(username="bob").exists()


@pytest.mark.django_db
def test_create_user_refuses_an_unknown_role(flow):
    with pytest.raises(CommandError, match="invalid choice"):
        run("create_user", "bob", "--role", "owner", "--project", "FM")

    assert not User.objects.filter(username="bob").exists()


# --- issue_token ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_issue_token_prints_a_token_and_stores_only_its_hash():
    user = UserFactory(username="ada")

    out, err = run("issue_token", "ada")

    token = out.strip()
    row = AuthToken.objects.get()
    assert token.startswith("fm_") and len(token) > 40
    assert (row.user, row.digest) == (user, hash_token(token))
    assert row.digest != token
    stored = [str(value) for value in AuthToken.objects.values().get().values()]
    assert not any(token in value for value in stored)
    assert err.startswith("Token for ada (expires ")


@pytest.mark.django_db
@pytest.mark.parametrize(("args", "days"), [((), 90), (("--days", "7"), 7)])
def test_issue_token_expires_after_the_days_asked_for(args, days):
    UserFactory(username="ada")
    before = timezone.now()

    run("issue_token", "ada", *args)

    expiry = AuthToken.objects.get().expiry
    assert before + timedelta(days=days) <= expiry <= timezone.now() + timedelta(days=days)


@pytest.mark.django_db
@pytest.mark.parametrize("days", ["0", "-1", "91"])
def test_issue_token_refuses_an_agent_a_token_that_never_expires_or_outlives_90_days(flow, days):
    with pytest.raises(CommandError) as refused:
        run("issue_token", flow.agent.username, "--days", days)

    assert str(refused.value) == (
        "fm-agent's tokens last 1 to 90 days (the agent bound, FACTORY_TOKEN_MAX_DAYS_AGENT); "
        "none lasts forever"
    )
    assert AuthToken.objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("role", "longest"),
    [("agent", 90), ("verifier", 365), ("reviewer", 365), ("manager", 365), ("admin", 365)],
)
def test_issue_token_bounds_a_tokens_lifetime_by_the_users_role(flow, role, longest):
    user = getattr(flow, role, None) or User.objects.create_superuser("admin", password="pw")

    before = timezone.now() + timedelta(days=longest)
    run("issue_token", user.username, "--days", str(longest))
    with pytest.raises(CommandError, match=f"tokens last 1 to {longest} days"):
        run("issue_token", user.username, "--days", str(longest + 1))

    expiry = AuthToken.objects.get().expiry
    assert before <= expiry <= timezone.now() + timedelta(days=longest)


@pytest.mark.django_db
def test_an_agent_who_reviews_elsewhere_gets_the_reviewer_bound(flow, other_flow, settings):
    settings.FACTORY_TOKEN_MAX_DAYS = {**settings.FACTORY_TOKEN_MAX_DAYS, "reviewer": 120}
    Membership.objects.create(user=flow.agent, project=other_flow.project, role="reviewer")

    run("issue_token", flow.agent.username, "--days", "120")
    with pytest.raises(CommandError, match="the agent bound"):
        run("issue_token", flow.agent2.username, "--days", "120")

    assert list(AuthToken.objects.values_list("user__username", flat=True)) == ["fm-agent"]


@pytest.mark.django_db
def test_issue_token_refuses_a_token_past_the_cap_and_names_it(settings):
    settings.FACTORY_TOKEN_MAX_PER_USER = 2
    user = UserFactory(username="ada")
    AuthToken.objects.create(user=user, expiry=timedelta(days=-1))  # expired: not counted
    run("issue_token", "ada")
    run("issue_token", "ada")

    with pytest.raises(CommandError) as refused:
        run("issue_token", "ada")

    assert str(refused.value) == (
        "ada already has 2 unexpired tokens, the most allowed (FACTORY_TOKEN_MAX_PER_USER=2); "
        "revoke one first, on the API tokens page (/tokens/) or in the admin"
    )
    assert AuthToken.objects.filter(user=user).count() == 3


@pytest.mark.django_db
def test_each_issued_token_is_new():
    UserFactory(username="ada")

    tokens = {run("issue_token", "ada")[0] for _ in range(3)}

    assert len(tokens) == 3
    assert AuthToken.objects.count() == 3


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["nobody", "inactive"])
def test_issue_token_refuses_an_unknown_or_inactive_user(who):
    UserFactory(username="inactive", is_active=False)

    with pytest.raises(CommandError, match=f"no active user '{who}'"):
        run("issue_token", who)

    assert AuthToken.objects.count() == 0
