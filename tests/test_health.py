"""The probes: /healthz answers while the process serves, /readyz names what is down and
tells nothing of the site's settings."""

import socket
from unittest import mock

import pytest
from django.db import OperationalError

from factory_site import health
from factory_site.celery import app as celery_app
from runner.sandbox import Sandbox, SandboxUnavailable
from tests.conftest import postgres_only
from tests.pgbouncer import behind, pgbouncer

# What a real error message would carry, and an answer must not.
SECRETS = ["db.internal.example", "10.20.30.40", "hunter2", "factory_owner", "/srv/factory"]


class Unavailable(Sandbox):
    def check(self):
        raise SandboxUnavailable("the runner needs bwrap on its machine (at /srv/factory/bin)")

    def run(self, command, **kwargs):
        raise AssertionError("never run")


class Ready(Unavailable):
    def check(self):
        return None


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again once the block ends


def test_healthz_answers_ok_without_a_query_a_login_or_an_allowed_host(
    client, db, django_assert_num_queries
):
    with django_assert_num_queries(0):
        response = client.get("/healthz", HTTP_HOST="10.0.0.7")

    assert (response.status_code, response.json()) == (200, {"status": "ok"})
    assert response["Cache-Control"] == "no-store"
    assert client.get("/", HTTP_HOST="10.0.0.7").status_code == 400  # pages still check it


@pytest.mark.django_db
def test_readyz_answers_ok_naming_each_check(client):
    response = client.get("/readyz")

    assert response.status_code == 200
    assert response.json() == {
        "status": "ok",
        "checks": {"database": "ok", "broker": "eager", "storage": "ok"},
    }


@pytest.mark.django_db
def test_readyz_is_503_naming_the_database_when_it_cannot_connect_and_leaks_nothing(client):
    refused = OperationalError(
        'connection to server at "db.internal.example" (10.20.30.40), port 5432 failed: '
        'password authentication failed for user "factory_owner" (password hunter2)'
    )

    with mock.patch(
        "django.db.backends.base.base.BaseDatabaseWrapper.connect", side_effect=refused
    ):
        response = client.get("/readyz")

    assert response.status_code == 503
    assert response.json() == {
        "status": "down",
        "down": ["database"],
        "checks": {"database": "down (OperationalError)", "broker": "eager", "storage": "ok"},
    }
    assert not [secret for secret in SECRETS if secret in response.content.decode()]
    assert client.get("/readyz").status_code == 200  # the site's own connection was not harmed


@pytest.mark.django_db
def test_a_check_that_is_down_is_logged_once_in_one_line_with_its_reason_and_request_id(
    client, logged
):
    with mock.patch(
        "django.db.backends.base.base.BaseDatabaseWrapper.connect",
        side_effect=OperationalError("no route to db.internal.example"),
    ):
        client.get("/readyz", HTTP_X_REQUEST_ID="probe-1")

    assert [(r.name, r.levelname, r.request_id, r.getMessage(), r.exc_info) for r in logged.records] == [
        ("factory_site.health", "WARNING", "probe-1", "readyz: database is down: OperationalError: no route to db.internal.example", None),
    ]  # fmt: skip


@pytest.mark.django_db
def test_readyz_names_a_broker_that_does_not_answer(client, monkeypatch):
    monkeypatch.setattr(celery_app.conf, "task_always_eager", False)
    monkeypatch.setattr(celery_app.conf, "broker_url", f"redis://127.0.0.1:{closed_port()}/0")

    response = client.get("/readyz")

    assert (response.status_code, response.json()["down"]) == (503, ["broker"])
    assert response.json()["checks"]["broker"] == "down (ConnectionError)"
    assert "127.0.0.1" not in response.content.decode()


@pytest.mark.django_db
def test_readyz_names_an_evidence_store_it_cannot_read(client, settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "not-a-folder"
    settings.MEDIA_ROOT.write_text("a file where the store should be")

    response = client.get("/readyz")

    assert (response.status_code, response.json()["down"]) == (503, ["storage"])
    assert response.json()["checks"]["storage"] == "down (NotADirectoryError)"
    assert str(tmp_path) not in response.content.decode()
    assert settings.MEDIA_ROOT.read_text() == "a file where the store should be"


@pytest.mark.django_db
def test_readyz_checks_the_sandbox_only_on_a_runner_host(client, settings):
    settings.FACTORY_RUNNER_SANDBOX = f"{__name__}.Unavailable"
    assert "sandbox" not in client.get("/readyz").json()["checks"]

    settings.FACTORY_RUNNER_HOST = True
    down = client.get("/readyz")
    settings.FACTORY_RUNNER_SANDBOX = f"{__name__}.Ready"
    up = client.get("/readyz")

    assert (down.status_code, down.json()["down"]) == (503, ["sandbox"])
    assert down.json()["checks"]["sandbox"] == "down (SandboxUnavailable)"
    assert "/srv/factory" not in down.content.decode()
    assert (up.status_code, up.json()["checks"]["sandbox"]) == (200, "ok")


@pytest.mark.django_db
def test_the_probes_are_not_redirected_to_https_and_need_no_login(client, settings):
    settings.SECURE_SSL_REDIRECT = True

    answers = [client.get(path).status_code for path in ("/healthz", "/readyz", "/")]

    assert answers == [200, 200, 301]


@pytest.mark.django_db
def test_the_probes_answer_only_get_and_head(client):
    answers = [
        (client.head("/readyz").status_code, client.post("/readyz").status_code),
        (client.head("/healthz").status_code, client.delete("/healthz").status_code),
    ]

    assert answers == [(200, 405), (200, 405)]


@postgres_only
@pytest.mark.django_db
def test_the_database_check_leaves_no_setting_on_a_pooled_server_connection():
    # One server connection: whoever comes after the probe gets the one the probe used.
    with pgbouncer(pool_size=1) as pooler, behind(pooler):
        with pooler.connect(autocommit=True) as before:
            default = before.execute("SHOW statement_timeout").fetchone()[0]

        checked = health.database()

        with pooler.connect(autocommit=True) as after:
            left = after.execute("SHOW statement_timeout").fetchone()[0]

    assert (checked, left) == ("ok", default)
