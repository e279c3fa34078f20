"""The admin's Users page, tried as a staff user holding the permission to change users and
nothing more would: Django's own page let them make anyone (themselves included) staff or
superuser, or set the superuser's password and sign in as it. Only a superuser gives those
flags, groups and permissions, or changes a staff or superuser account."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from tests.factories import UserFactory

User = get_user_model()
pytestmark = pytest.mark.django_db


@pytest.fixture
def clerk():
    """A staff user who may view and change users."""
    user = UserFactory(username="clerk", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=["view_user", "change_user"]))
    client = Client()
    client.force_login(user)
    return client


def change(user) -> str:
    return reverse("admin:auth_user_change", args=[user.pk])


def form(user, **more) -> dict:
    return {
        "username": user.username,
        "email": user.email,
        "is_active": "on",
        "date_joined_0": "2026-01-01",
        "date_joined_1": "00:00:00",
        **more,
    }


def flags(user) -> tuple[bool, bool, int]:
    user = User.objects.get(pk=user.pk)
    return user.is_staff, user.is_superuser, user.user_permissions.count()


def test_staff_who_may_change_users_cannot_make_anyone_staff_or_superuser(clerk):
    ravi = UserFactory(username="ravi")
    everything = Permission.objects.get(codename="change_identity")

    response = clerk.post(
        change(ravi),
        form(
            ravi,
            email="ravi@x.test",
            is_staff="on",
            is_superuser="on",
            user_permissions=[everything.pk],
        ),
    )

    assert response.status_code == 302, response.content
    assert flags(ravi) == (False, False, 0)
    assert User.objects.get(pk=ravi.pk).email == "ravi@x.test"  # the rest of the page works


def test_staff_who_may_change_users_cannot_change_a_staff_account_or_its_password(
    clerk, admin_user
):
    own = User.objects.get(username="clerk")
    password = reverse("admin:auth_user_password_change", args=[admin_user.pk])

    themselves = clerk.post(change(own), form(own, is_superuser="on", is_staff="on"))
    superuser = clerk.post(change(admin_user), form(admin_user, email="mine@x.test"))
    new_password = clerk.post(
        password, {"password1": "Clerk-owns-it-9", "password2": "Clerk-owns-it-9"}
    )

    assert [r.status_code for r in (themselves, superuser, new_password)] == [403, 403, 403]
    assert flags(own) == (True, False, 2)
    assert User.objects.get(pk=admin_user.pk).check_password("password") is True
    assert User.objects.get(pk=admin_user.pk).email == admin_user.email


def test_a_superuser_still_makes_an_account_staff(admin_client):
    ravi = UserFactory(username="ravi")

    response = admin_client.post(change(ravi), form(ravi, is_staff="on"))

    assert response.status_code == 302, response.content
    assert flags(ravi) == (True, False, 0)


def test_staff_who_may_delete_users_cannot_delete_a_staff_account(clerk, admin_user):
    User.objects.get(username="clerk").user_permissions.add(
        Permission.objects.get(codename="delete_user")
    )
    ravi = UserFactory(username="ravi")

    one = clerk.post(reverse("admin:auth_user_delete", args=[admin_user.pk]), {"post": "yes"})
    bulk = clerk.post(
        reverse("admin:auth_user_changelist"),
        {"action": "delete_selected", "_selected_action": [admin_user.pk, ravi.pk], "post": "yes"},
    )

    assert (one.status_code, bulk.status_code) == (403, 403)
    assert set(User.objects.values_list("username", flat=True)) == {"admin", "clerk", "ravi"}
