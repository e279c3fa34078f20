"""Webhooks in (``/hooks/github/``): a delivery is kept once, for the project following
its repository on the host it came from, only when its signature matches that project's
secret; every refusal is a 4xx with a reason and keeps nothing."""

import gzip
import hashlib
import hmac
import json
from pathlib import Path

import pytest

from codehosts.models import HostDelivery
from tests.factories import ProjectFactory

SECRET = "It's a Secret to Everybody"
OTHER_SECRET = "another project's secret"
URL = "/hooks/github/"


def host(repository="octo-org/widgets", secret_env="FACTORY_HOST_WIDGETS_HOOK", **more):
    return {
        "provider": "github",
        "api_url": "https://api.github.com",
        "repository": repository,
        "token_env": "FACTORY_HOST_WIDGETS_TOKEN",
        "webhook_secret_env": secret_env,
        "issues": None,
        **more,
    }


@pytest.fixture
def followed(db, monkeypatch):
    monkeypatch.setenv("FACTORY_HOST_WIDGETS_HOOK", SECRET)
    monkeypatch.setenv("FACTORY_HOST_GADGETS_HOOK", OTHER_SECRET)
    widgets = ProjectFactory(slug="WID", code_host=host())
    gadgets = ProjectFactory(
        slug="GAD", code_host=host("octo-org/gadgets", "FACTORY_HOST_GADGETS_HOOK")
    )
    return widgets, gadgets


def payload(repository="octo-org/widgets", api="https://api.github.com", **more):
    return {
        "action": "opened",
        "number": 7,
        "pull_request": {"number": 7, "head": {"sha": "a" * 40}},
        "repository": {"full_name": repository, "url": f"{api}/repos/{repository}"},
        **more,
    }


def sign(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def deliver(
    client,
    body,
    *,
    event="pull_request",
    delivery="72d3162e-cc78-11e3-81ab-4c9367dc0958",
    signature=None,
    content_type="application/json",
):
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    headers = {"HTTP_X_GITHUB_EVENT": event, "HTTP_X_GITHUB_DELIVERY": delivery}
    if signature is not False:
        headers["HTTP_X_HUB_SIGNATURE_256"] = signature or sign(body)
    return client.post(URL, body, content_type=content_type, **headers)


def test_githubs_documented_example_signature_is_accepted():
    # docs.github.com, "Validating webhook deliveries": the secret, the payload and the
    # signature it gives as a test of an implementation.
    from codehosts.signatures import signed_by

    expected = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    assert signed_by(b"Hello, World!", expected, [SECRET])
    assert not signed_by(b"Hello, World!", expected, ["a wrong secret"])


def test_a_signed_delivery_is_kept_for_the_project_following_its_repository(client, followed):
    widgets, _ = followed

    response = deliver(client, payload())

    assert response.status_code == 202
    assert response.json() == {
        "delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
        "event": "pull_request",
        "detail": "received",
    }
    kept = HostDelivery.objects.get()
    assert (kept.project, kept.event, kept.action) == (widgets, "pull_request", "opened")
    assert kept.subject == {"repository": "octo-org/widgets", "pull_request": 7}
    assert kept.body_sha256 == hashlib.sha256(json.dumps(payload()).encode()).hexdigest()


def test_a_delivery_sent_again_under_its_id_is_not_kept_twice(client, followed):
    deliver(client, payload())

    again = deliver(client, payload())

    assert again.status_code == 200
    assert again.json()["detail"] == "already received"
    assert HostDelivery.objects.count() == 1


def test_either_secret_is_taken_while_one_is_rotated(client, followed, monkeypatch):
    monkeypatch.setenv("FACTORY_HOST_WIDGETS_HOOK", "the new secret")
    monkeypatch.setenv("FACTORY_HOST_WIDGETS_HOOK_PREVIOUS", SECRET)
    body = json.dumps(payload()).encode()

    old = deliver(client, body, delivery="one", signature=sign(body, SECRET))
    new = deliver(client, body, delivery="two", signature=sign(body, "the new secret"))

    assert (old.status_code, new.status_code) == (202, 202)


@pytest.mark.parametrize(
    "forged",
    [
        "a bad signature",
        "no signature",
        "signed with another project's secret",
        "a repository no project follows",
        "the same repository on another host",
        "no repository",
    ],
)
def test_a_forged_delivery_is_401_the_same_whatever_is_followed_and_keeps_nothing(
    client, followed, forged
):
    body, signature = payload(), None
    if forged == "a bad signature":
        signature = "sha256=" + "0" * 64
    elif forged == "no signature":
        signature = False
    elif forged == "signed with another project's secret":
        # Another project's secret, this project's pull request: it names widgets' #7.
        signature = sign(json.dumps(body).encode(), OTHER_SECRET)
    elif forged == "a repository no project follows":
        body = payload("someone/else")
    elif forged == "the same repository on another host":
        body = payload(api="https://ghe.example.com/api/v3")
    else:
        body = {k: v for k, v in payload().items() if k != "repository"}

    response = deliver(client, body, signature=signature)

    assert response.status_code == 401
    assert response.json()["code"] == "bad_signature"
    assert HostDelivery.objects.count() == 0


def test_the_refusal_does_not_say_whether_a_project_follows_the_repository(client, followed):
    followed_one = deliver(client, payload(), signature="sha256=" + "0" * 64)
    stranger = deliver(client, payload("someone/else"))

    assert followed_one.json() == stranger.json()


@pytest.mark.parametrize(
    ("body", "headers", "status", "code"),
    [
        (b"{not json", {}, 400, "bad_delivery"),
        (b"[1, 2]", {}, 400, "bad_delivery"),
        (b"\xff\xfe", {}, 400, "bad_delivery"),
        (b"[" * 100_000 + b"]" * 100_000, {}, 400, "bad_delivery"),
        (None, {"event": ""}, 400, "bad_delivery"),
        (None, {"delivery": ""}, 400, "bad_delivery"),
        (None, {"delivery": "x" * 101}, 400, "bad_delivery"),
        (
            None,
            {"content_type": "application/x-www-form-urlencoded"},
            415,
            "unsupported_media_type",
        ),
    ],
)
def test_a_malformed_delivery_is_refused_with_a_reason_and_keeps_nothing(
    client, followed, body, headers, status, code
):
    body = body if body is not None else json.dumps(payload()).encode()

    response = deliver(client, body, signature=sign(body), **headers)

    assert response.status_code == status
    assert response.json()["code"] == code
    assert HostDelivery.objects.count() == 0


def test_a_delivery_larger_than_the_limit_is_413_and_keeps_nothing(client, followed, settings):
    settings.FACTORY_CODE_HOST_HOOK_MAX_BYTES = 1000
    body = json.dumps(payload(padding="x" * 2000)).encode()

    response = deliver(client, body)

    assert response.status_code == 413
    assert response.json()["code"] == "too_large"
    assert HostDelivery.objects.count() == 0


def test_a_delivery_larger_than_other_request_bodies_is_still_taken(client, followed, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    body = json.dumps(payload(issue={"number": 3, "body": "x" * 5000})).encode()

    response = deliver(client, body)

    assert response.status_code == 202
    assert HostDelivery.objects.get().subject["issue"] == 3


def test_only_post_is_taken(client, followed):
    response = client.get(URL)

    assert response.status_code == 405
    assert response["Allow"] == "POST"


def test_a_ping_signed_with_the_secret_is_answered_and_nothing_is_kept(client, followed):
    response = deliver(client, payload(zen="Keep it logically awesome."), event="ping")

    assert response.status_code == 200
    assert response.json() == {"detail": "pong"}
    assert HostDelivery.objects.count() == 0


def test_an_apps_own_ping_naming_no_repository_is_checked_against_the_apps_projects(
    client, db, monkeypatch
):
    monkeypatch.setenv("FACTORY_HOST_APP_HOOK", SECRET)
    app = {"app_id": 42, "installation_id": 7, "private_key_env": "FACTORY_HOST_APP_KEY"}
    code_host = {**host(secret_env="FACTORY_HOST_APP_HOOK"), **app}
    del code_host["token_env"]
    ProjectFactory(code_host=code_host)
    body = json.dumps({"zen": "Design for failure.", "hook": {"type": "App", "app_id": 42}})

    signed = deliver(client, body.encode(), event="ping")
    forged = deliver(client, body.encode(), event="ping", delivery="2", signature="sha256=00")

    assert (signed.status_code, forged.status_code) == (200, 401)
    assert HostDelivery.objects.count() == 0


def test_the_secret_never_appears_in_an_answer_or_a_log_line(client, followed, caplog):
    responses = [
        deliver(client, payload(), signature="sha256=" + "0" * 64),
        deliver(client, payload()),
    ]

    for text in [r.content.decode() for r in responses] + [caplog.text]:
        assert SECRET not in text


EXAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "github" / "webhook-examples.json.gz"


def recorded():
    """(event, index, payload) for every recorded delivery that names a repository."""
    examples = json.loads(gzip.decompress(EXAMPLES.read_bytes()))
    return [
        pytest.param(event, index, payload, id=f"{event}-{index}-{payload.get('action', '')}")
        for event, payloads in sorted(examples.items())
        for index, payload in enumerate(payloads)
        if isinstance(payload.get("repository"), dict)
    ]


@pytest.mark.parametrize(("event", "index", "payload"), recorded())
def test_every_recorded_github_delivery_is_taken_for_its_repository_and_says_what_it_is_about(
    client, db, monkeypatch, event, index, payload
):
    monkeypatch.setenv("FACTORY_HOST_WIDGETS_HOOK", SECRET)
    project = ProjectFactory(code_host=host(payload["repository"]["full_name"]))
    body = json.dumps(payload).encode()

    response = deliver(client, body, event=event, delivery=f"{event}-{index}")

    if event == "ping":
        assert (response.status_code, response.json()) == (200, {"detail": "pong"})
        assert HostDelivery.objects.count() == 0
        return
    assert response.status_code == 202
    kept = HostDelivery.objects.get()
    assert (kept.project, kept.event, kept.action) == (project, event, payload.get("action", ""))
    assert kept.subject["repository"] == payload["repository"]["full_name"]
    for kind in ("pull_request", "issue"):
        if kind in payload:
            assert kept.subject[kind] == payload[kind]["number"]
    for kind in ("check_suite", "check_run", "merge_group"):
        if kind in payload:
            assert kept.subject[f"{kind}_head_sha"] == payload[kind]["head_sha"]
    if event == "status":
        assert kept.subject["status_sha"] == payload["sha"]


def test_a_recorded_installation_delivery_is_checked_against_its_installations_projects(
    client, db, monkeypatch
):
    monkeypatch.setenv("FACTORY_HOST_APP_HOOK", SECRET)
    examples = json.loads(gzip.decompress(EXAMPLES.read_bytes()))
    payload = examples["installation"][0]
    app = {
        "app_id": 1,
        "installation_id": payload["installation"]["id"],
        "private_key_env": "FACTORY_HOST_APP_KEY",
    }
    code_host = {**host(secret_env="FACTORY_HOST_APP_HOOK"), **app}
    del code_host["token_env"]
    ProjectFactory(code_host=code_host)
    body = json.dumps(payload).encode()

    signed = deliver(client, body, event="installation")
    forged = deliver(client, body, event="installation", delivery="2", signature=sign(body, "x"))

    assert (signed.status_code, signed.json()) == (200, {"detail": "nothing to keep"})
    assert forged.status_code == 401
    assert HostDelivery.objects.count() == 0
