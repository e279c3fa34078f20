"""Who may point a single sign-on identity at which account, and the trail every link leaves.

Only a superuser may link an identity to a staff or superuser account, or change or delete
one that signs in as such an account (``projects.services.identity_link`` and
``identity_unlink``); every link, change and deletion is an Event naming who made it. The
admin is driven for real, as a staff user holding only the identity permissions would."""

import threading
import time

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection, transaction
from django.test import Client
from django.urls import reverse

from projects.errors import PermissionDenied
from projects.models import Event, Identity, Membership
from projects.services import identity_link, identity_sign_in, identity_unlink, membership_grant
from tests.conftest import postgres_only
from tests.factories import ProjectFactory, UserFactory

User = get_user_model()
ISSUER = "https://idp.example.test/realms/factory"
REFUSED = "only a superuser may link an identity to a staff or superuser account"
REFUSED_CHANGE = "only a superuser may change or delete an identity that signs in as a staff"

pytestmark = pytest.mark.django_db


@pytest.fixture
def clerk():
    """A staff user holding only the identity permissions, signed in with their own
    provider account (an identity that signs in as them)."""
    user = UserFactory(username="clerk", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__model="identity"))
    Identity.objects.create(user=user, issuer=ISSUER, subject="clerk-sub")
    return user


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def trail() -> list[tuple]:
    """Every identity Event: (transition, actor, issuer, subject, user, from user)."""
    events = Event.objects.filter(content_type=ContentType.objects.get_for_model(Identity))
    return [
        (
            e.transition,
            e.actor_label,
            e.extra["issuer"],
            e.extra["subject"],
            e.extra["user"],
            e.extra.get("from_user"),
        )
        for e in events.select_related("actor").order_by("pk")
    ]


def change(identity) -> str:
    return reverse("admin:projects_identity_change", args=[identity.pk])


def linked(subject: str) -> str:
    return Identity.objects.get(issuer=ISSUER, subject=subject).user.username


# --- A staff user with the identity permissions and nothing more ---------------------------


def test_staff_holding_only_the_identity_permissions_cannot_point_their_identity_at_the_superuser(
    clerk, admin_user
):
    own = clerk.identities.get()

    response = signed_in(clerk).post(change(own), {"user": admin_user.pk})

    assert response.status_code == 200  # the form again, with the reason
    assert REFUSED_CHANGE in response.content.decode()
    assert linked("clerk-sub") == "clerk"
    assert identity_sign_in(issuer=ISSUER, subject="clerk-sub", username="x") == clerk
    assert trail() == []


def test_staff_holding_only_the_identity_permissions_cannot_point_any_identity_at_a_staff_account(
    clerk, admin_user
):
    nora = identity_sign_in(issuer=ISSUER, subject="nora-sub", username="nora")
    other_staff = UserFactory(username="ops", is_staff=True)
    before = trail()

    at_admin = signed_in(clerk).post(change(nora.identities.get()), {"user": admin_user.pk})
    at_staff = signed_in(clerk).post(change(nora.identities.get()), {"user": other_staff.pk})

    assert (at_admin.status_code, at_staff.status_code) == (200, 200)
    assert REFUSED in at_admin.content.decode()
    assert REFUSED in at_staff.content.decode()
    assert linked("nora-sub") == "nora"
    assert trail() == before


def test_staff_holding_only_the_identity_permissions_cannot_add_an_identity_for_a_staff_account(
    clerk, admin_user
):
    response = signed_in(clerk).post(
        reverse("admin:projects_identity_add"),
        {"user": admin_user.pk, "issuer": ISSUER, "subject": "second-account"},
    )

    assert response.status_code == 200
    assert REFUSED in response.content.decode()
    assert Identity.objects.filter(subject="second-account").exists() is False
    assert trail() == []


def test_staff_holding_only_the_identity_permissions_cannot_delete_a_staff_accounts_identity(
    clerk, admin_user
):
    admins = Identity.objects.create(user=admin_user, issuer=ISSUER, subject="admin-sub")
    client = signed_in(clerk)
    url = reverse("admin:projects_identity_delete", args=[admins.pk])

    response = client.post(url, {"post": "yes"})
    page = client.get(response["Location"]).content.decode()

    assert (response.status_code, response["Location"]) == (302, change(admins))
    assert REFUSED_CHANGE.capitalize() in page  # the admin's messages start with a capital
    assert linked("admin-sub") == "admin"
    assert trail() == []


def test_staff_holding_the_identity_permissions_link_ordinary_accounts_and_each_link_is_an_event(
    clerk,
):
    maria = UserFactory(username="maria")  # her password account from before single sign-on
    identity_sign_in(issuer=ISSUER, subject="maria-sub", username="maria")  # made maria-2
    ravi = UserFactory(username="ravi")
    client = signed_in(clerk)
    identity = Identity.objects.get(subject="maria-sub")

    repointed = client.post(change(identity), {"user": maria.pk})
    added = client.post(
        reverse("admin:projects_identity_add"),
        {"user": ravi.pk, "issuer": ISSUER, "subject": "ravi-sub"},
    )
    ravis = Identity.objects.get(subject="ravi-sub")
    deleted = client.post(
        reverse("admin:projects_identity_delete", args=[ravis.pk]), {"post": "yes"}
    )

    assert [r.status_code for r in (repointed, added, deleted)] == [302, 302, 302]
    assert linked("maria-sub") == "maria"
    assert Identity.objects.filter(subject="ravi-sub").exists() is False
    assert trail() == [
        ("link", "system", ISSUER, "maria-sub", "maria-2", None),
        ("relink", "clerk", ISSUER, "maria-sub", "maria", "maria-2"),
        ("link", "clerk", ISSUER, "ravi-sub", "ravi", None),
        ("unlink", "clerk", ISSUER, "ravi-sub", "ravi", None),
    ]


def test_the_identity_pages_user_search_offers_staff_no_staff_or_superuser_account(
    clerk, admin_client, admin_user
):
    clerk.user_permissions.add(Permission.objects.get(codename="view_user"))
    UserFactory(username="ops", is_staff=True)
    UserFactory(username="owner", is_superuser=True)
    UserFactory(username="ravi")
    url = reverse("admin:autocomplete")
    query = {"app_label": "projects", "model_name": "identity", "field_name": "user"}

    for_clerk = signed_in(clerk).get(url, query).json()["results"]
    for_superuser = admin_client.get(url, query).json()["results"]

    assert [r["text"] for r in for_clerk] == ["ravi"]
    assert sorted(r["text"] for r in for_superuser) == ["admin", "clerk", "ops", "owner", "ravi"]


# --- A superuser ---------------------------------------------------------------------------


def test_a_superuser_may_point_an_identity_at_a_staff_account_and_the_event_names_them(
    clerk, admin_client, admin_user
):
    url = change(clerk.identities.get())

    response = admin_client.post(url, {"user": admin_user.pk})
    page = admin_client.get(url).content.decode()

    assert response.status_code == 302, response.content
    assert " pointed at admin by admin" in page  # the identity's page shows its links
    assert identity_sign_in(issuer=ISSUER, subject="clerk-sub", username="x") == admin_user
    [event] = Event.objects.filter(transition="relink")
    assert (event.actor, event.project_id, event.object_key) == (
        admin_user,
        None,
        f"clerk-sub at {ISSUER}"[:64],
    )
    assert trail() == [("relink", "admin", ISSUER, "clerk-sub", "admin", "clerk")]


# --- The service ---------------------------------------------------------------------------


def test_the_first_sign_in_records_its_link_as_the_systems():
    user = identity_sign_in(issuer=ISSUER, subject="s-1", username="nora")
    identity_sign_in(issuer=ISSUER, subject="s-1", username="nora")  # the next finds it

    [event] = Event.objects.filter(object_id=user.identities.get().pk, transition="link")
    assert (event.actor_id, event.project_id, event.task_id) == (None, None, None)
    assert event.reason == "single sign-on: the first sign-in"
    assert trail() == [("link", "system", ISSUER, "s-1", "nora", None)]


def test_linking_needs_the_identity_permission_and_a_refusal_changes_nothing(clerk):
    nora = identity_sign_in(issuer=ISSUER, subject="nora-sub", username="nora")
    stranger = UserFactory(username="stranger", is_staff=True)  # no permission at all
    before = trail()

    with pytest.raises(PermissionDenied) as repoint:
        identity_link(identity=nora.identities.get(), user=stranger, actor=stranger)
    with pytest.raises(PermissionDenied) as unlink:
        identity_unlink(identity=nora.identities.get(), actor=stranger)
    with pytest.raises(PermissionDenied) as staff:
        identity_link(issuer=ISSUER, subject="new", user=stranger, actor=clerk)

    assert (repoint.value.code, unlink.value.code, staff.value.code) == (
        "permission_denied",
        "permission_denied",
        "superuser_required",
    )
    assert linked("nora-sub") == "nora"
    assert Identity.objects.count() == 2
    assert trail() == before


def test_an_account_no_identity_signs_in_as_any_more_loses_the_roles_the_provider_granted(
    settings, admin_user
):
    settings.FACTORY_OIDC_ROLE_MAP = {"factory-managers": [("FM", "manager")]}
    fm = ProjectFactory(slug="FM")
    maria = UserFactory(username="maria")
    second = identity_sign_in(issuer=ISSUER, subject="maria-sub", username="maria")
    membership_grant(user=second, project=fm, role="manager", reason="the provider's claim")
    membership_grant(user=second, project=fm, role="reviewer", reason="given in the site")

    identity_link(identity=second.identities.get(), user=maria, actor=admin_user)

    assert list(Membership.objects.filter(user=second).values_list("role", flat=True)) == [
        "reviewer"  # not a pair the map names: the site's, so it stays
    ]
    [revoked] = Event.objects.filter(transition="revoke")
    assert (revoked.actor, revoked.extra) == (admin_user, {"user": "maria-2", "role": "manager"})
    assert revoked.reason == "single sign-on: no identity signs in as this account any more"


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_change_that_waited_for_a_superusers_link_is_judged_by_that_link(clerk, admin_user):
    nora = identity_sign_in(issuer=ISSUER, subject="nora-sub", username="nora")
    ravi = UserFactory(username="ravi")
    linked_to_admin, release = threading.Event(), threading.Event()
    refusals = []

    def superuser():  # points nora's identity at admin, and holds its transaction open
        try:
            with transaction.atomic():
                identity_link(identity=nora.identities.get(), user=admin_user, actor=admin_user)
                linked_to_admin.set()
                release.wait(60)
        finally:
            connection.close()

    def staff():  # meanwhile asks to point it at an ordinary account
        try:
            identity_link(identity=nora.identities.get(), user=ravi, actor=clerk)
        except Exception as refused:  # surfaced in the assertion below, whatever it is
            refusals.append(getattr(refused, "code", repr(refused)))
        finally:
            connection.close()

    first = threading.Thread(target=superuser)
    first.start()
    assert linked_to_admin.wait(60)
    second = threading.Thread(target=staff)
    second.start()
    waiting = wait_for_a_lock_wait()
    release.set()
    first.join(60)
    second.join(60)

    assert waiting is True  # the staff user's change waited for the row
    assert refusals == ["superuser_required"]
    assert linked("nora-sub") == "admin"
    assert [t[0] for t in trail()] == ["link", "relink"]


def wait_for_a_lock_wait(deadline_seconds: float = 60) -> bool:
    """Whether another connection comes to wait on a row lock before the deadline."""
    deadline = time.monotonic() + deadline_seconds
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0]:
                return True
            time.sleep(0.01)
    return False
