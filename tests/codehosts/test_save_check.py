"""Saving a code host reaches the host first: credentials that fall short are a 409 naming
each missing permission, a host that cannot be asked is a 503 with the reason, and in
both cases nothing is saved and no Event is written."""

import pytest

from projects.models import Event
from tests.codehosts.conftest import APP_ID, KEY_ENV, REPOSITORY, TOKEN_ENV
from tests.github_standin import app_key


@pytest.fixture
def hosted(github, settings, monkeypatch):
    settings.FACTORY_CODE_HOST_URLS = [github.url]
    monkeypatch.setenv("FACTORY_HOST_WIDGETS_HOOK", "hook secret")
    monkeypatch.setenv(KEY_ENV, app_key()[0])


def block(github, **credentials):
    return {
        "provider": "github",
        "api_url": github.url,
        "repository": REPOSITORY,
        "webhook_secret_env": "FACTORY_HOST_WIDGETS_HOOK",
        **credentials,
    }


def app_block(github, installation):
    return block(github, app_id=APP_ID, installation_id=installation.id, private_key_env=KEY_ENV)


def save(api, flow, code_host):
    return api(flow.manager).patch(
        f"/api/v1/projects/{flow.project.slug}/",
        {"code_host": code_host, "name": "Renamed"},
        format="json",
    )


def unchanged(flow, events_before):
    flow.project.refresh_from_db()
    return (flow.project.code_host, flow.project.name != "Renamed", Event.objects.count()) == (
        {"provider": "none"},
        True,
        events_before,
    )


def test_an_installation_with_every_permission_is_saved(
    flow, api, github, repo, installation, hosted
):
    response = save(api, flow, app_block(github, installation))

    assert response.status_code == 200
    flow.project.refresh_from_db()
    assert flow.project.code_host["installation_id"] == installation.id


def test_missing_permissions_are_a_409_naming_each_and_nothing_is_saved(
    flow, api, github, repo, installation, hosted
):
    installation.permissions = {"metadata": "read", "pull_requests": "read", "contents": "write"}
    before = Event.objects.count()

    response = save(api, flow, app_block(github, installation))

    assert response.status_code == 409
    assert response.json()["code"] == "code_host_permissions"
    assert response.json()["missing"] == [
        "administration: read",
        "checks: write",
        "issues: write",
        "pull_requests: write",
        "statuses: read",
    ]
    assert unchanged(flow, before)


def test_a_token_the_host_does_not_take_is_a_409_and_nothing_is_saved(
    flow, api, github, repo, hosted, monkeypatch
):
    monkeypatch.setenv(TOKEN_ENV, "ghp_not_a_token_the_host_knows")
    before = Event.objects.count()

    response = save(api, flow, block(github, token_env=TOKEN_ENV))

    assert response.status_code == 409
    assert response.json()["detail"] == (
        "the code host refused these credentials: Bad credentials (401)"
    )
    assert "ghp_not_a_token" not in response.content.decode()
    assert unchanged(flow, before)


@pytest.mark.parametrize("fault", ["502", "timeout", "429"])
def test_a_host_that_cannot_be_asked_is_a_503_with_the_reason_and_nothing_is_saved(
    flow, api, github, repo, installation, hosted, settings, fault
):
    settings.FACTORY_CODE_HOST_TIMEOUT_SECONDS = 1
    github.fail(fault, count=5, retry_after=30)
    before = Event.objects.count()

    response = save(api, flow, app_block(github, installation))

    assert response.status_code == 503
    assert response.json()["code"] == "code_host_unavailable"
    assert response.json()["detail"].endswith("nothing was saved: try again")
    assert unchanged(flow, before)
