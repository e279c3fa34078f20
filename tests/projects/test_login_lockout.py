"""Login lockout (django-axes, ADR 0006): per username and per address, on /login/ and
/admin/login/, with a page that says when the lock ends, and `manage.py unlock`."""

import io

import pytest
from axes.models import AccessAttempt
from django.contrib.auth import get_user_model
from django.core.management import call_command

User = get_user_model()
WAIT = "in 15 minutes; each further try restarts the wait."


def log_in(client, username, password="wrong", path="/login/", **extra) -> int:
    return client.post(path, {"username": username, "password": password}, **extra).status_code


def unlock(*args) -> str:
    out = io.StringIO()
    call_command("unlock", *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_five_wrong_passwords_lock_the_username_and_the_right_one_changes_nothing(client, flow):
    statuses = [log_in(client, "fm-reviewer") for _ in range(5)]

    response = client.post("/login/", {"username": "fm-reviewer", "password": "pw"})

    assert statuses == [200, 200, 200, 200, 429]
    assert response.status_code == 429
    assert WAIT in response.content.decode()
    assert "python manage.py unlock USERNAME" in response.content.decode()
    assert "_auth_user_id" not in client.session
    assert User.objects.get(pk=flow.reviewer.pk).last_login is None


@pytest.mark.django_db
def test_a_locked_username_stays_locked_from_any_address(client, flow):
    for n in range(5):
        log_in(client, "fm-manager", REMOTE_ADDR=f"198.51.100.{n}")

    status = log_in(client, "fm-manager", "pw", REMOTE_ADDR="198.51.100.99")

    assert status == 429
    assert "_auth_user_id" not in client.session


@pytest.mark.django_db
def test_an_address_guessing_many_usernames_is_locked_for_all_of_them(client, flow):
    for n in range(5):
        log_in(client, f"guess{n}", REMOTE_ADDR="198.51.100.7")

    from_there = log_in(client, "fm-manager", "pw", REMOTE_ADDR="198.51.100.7")
    elsewhere = log_in(client, "fm-manager", "pw", REMOTE_ADDR="198.51.100.8")

    assert (from_there, elsewhere) == (429, 302)


@pytest.mark.django_db
def test_the_admin_login_locks_out_too(client, db):
    User.objects.create_superuser("root", password="pw")
    for _ in range(5):
        log_in(client, "root", path="/admin/login/")

    response = client.post("/admin/login/", {"username": "root", "password": "pw"})

    assert response.status_code == 429
    assert WAIT in response.content.decode()
    assert "_auth_user_id" not in client.session


@pytest.mark.django_db
def test_unlock_lifts_a_username_lock_at_once(client, flow):
    for _ in range(5):
        log_in(client, "fm-reviewer")

    out = unlock("fm-reviewer")
    again = unlock("fm-reviewer")

    assert out == "fm-reviewer: unlocked\n"
    assert again == "fm-reviewer: was not locked (no failed logins recorded)\n"
    assert log_in(client, "fm-reviewer", "pw") == 302


@pytest.mark.django_db
def test_unlock_lifts_an_address_lock(client, flow):
    for n in range(5):
        log_in(client, f"guess{n}", REMOTE_ADDR="198.51.100.7")

    out = unlock("--address", "198.51.100.7")

    assert out == "198.51.100.7: unlocked\n"
    assert AccessAttempt.objects.count() == 0
    assert log_in(client, "fm-manager", "pw", REMOTE_ADDR="198.51.100.7") == 302


@pytest.mark.django_db
def test_a_forged_forwarded_for_does_not_escape_the_address_lock(client, flow):
    for n in range(5):
        log_in(client, f"guess{n}", HTTP_X_FORWARDED_FOR=f"203.0.113.{n}")

    status = log_in(client, "fm-manager", "pw", HTTP_X_FORWARDED_FOR="203.0.113.99")

    assert status == 429
    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {"127.0.0.1"}


@pytest.mark.django_db
def test_behind_one_trusted_proxy_the_forwarded_address_is_locked(client, flow, settings):
    settings.FACTORY_TRUSTED_PROXIES = 1
    for n in range(5):
        log_in(client, f"guess{n}", HTTP_X_FORWARDED_FOR="forged, 203.0.113.7")

    locked = log_in(client, "fm-manager", "pw", HTTP_X_FORWARDED_FOR="203.0.113.7")
    other = log_in(client, "fm-reviewer", "pw", HTTP_X_FORWARDED_FOR="203.0.113.8")

    assert (locked, other) == (429, 302)
