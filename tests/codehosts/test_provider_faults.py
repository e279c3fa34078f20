"""The GitHub provider when the host misbehaves or the credentials fall short: waits the
host asks for are honoured (or handed to the caller when too long), reads are retried and
writes never sent twice, an expired token is renewed, missing permissions are named, and
no secret reaches a log line or an exception's text."""

import logging
import subprocess
import sys

import pytest

from codehosts.providers import (
    Access,
    Forbidden,
    NoHost,
    RateLimited,
    Unavailable,
    Unconfigured,
    provider_for,
)
from tests.codehosts.conftest import APP_ID, KEY_ENV, TOKEN_ENV, project_on
from tests.github_standin import app_key
from tests.github_standin.world import Issue

GET_REPO = "GET /repos/octo-org/widgets"
POST_CHECK = "POST /repos/octo-org/widgets/check-runs"


def test_a_rate_limit_is_waited_out_for_as_long_as_the_host_asks(github, repo, app_host, waits):
    github.fail("429", retry_after=7, match=GET_REPO)

    found = app_host.repository()

    assert found.full_name == "octo-org/widgets"
    assert waits == [7]
    assert [c for c in github.calls() if c.startswith(GET_REPO)] == [
        "GET /repos/octo-org/widgets 0",
        "GET /repos/octo-org/widgets 200",
    ]


def test_a_secondary_rate_limit_is_waited_out_too(github, repo, app_host, waits):
    github.fail("secondary", retry_after=3, match=GET_REPO)

    assert app_host.repository().default_branch == "main"
    assert waits == [3]


def test_a_wait_longer_than_the_provider_sits_out_is_the_callers(github, repo, app_host, waits):
    github.fail("429", retry_after=3600, match=GET_REPO)

    with pytest.raises(RateLimited) as limited:
        app_host.repository()

    assert (limited.value.retry_after, limited.value.status) == (3600, 429)
    assert waits == []


def test_a_read_that_met_a_bad_gateway_is_tried_again(github, repo, app_host, waits):
    github.fail("502", count=2, match=GET_REPO)

    assert app_host.repository().full_name == "octo-org/widgets"
    assert len([c for c in github.calls() if c.startswith(GET_REPO)]) == 3
    assert waits == [0, 0]


def test_one_read_in_three_answered_502_loses_nothing(github, repo, app_host):
    for number in range(1, 7):
        repo.issues[number] = Issue(number, f"I_{number}", f"Issue {number}", "", [], "ann")
    github.fail("502", every=3, match="GET /repos/octo-org/widgets/issues/")

    read = [app_host.issue(number).number for number in range(1, 7)]

    assert read == [1, 2, 3, 4, 5, 6]
    issue_calls = [c for c in github.calls() if "/issues/" in c]
    assert len(issue_calls) == 8
    assert [c for c in issue_calls if c.endswith(" 0")] == [
        "GET /repos/octo-org/widgets/issues/3 0",
        "GET /repos/octo-org/widgets/issues/5 0",
    ]


def test_a_read_that_keeps_failing_is_unavailable_after_the_retries(github, repo, app_host):
    github.fail("502", count=10, match=GET_REPO)

    with pytest.raises(Unavailable) as down:
        app_host.repository()

    assert (down.value.status, down.value.detail) == (502, "Server Error (502)")
    assert len([c for c in github.calls() if c.startswith(GET_REPO)]) == 4


def test_a_write_that_met_a_bad_gateway_is_not_sent_again(github, repo, app_host):
    github.fail("502", match=POST_CHECK)

    with pytest.raises(Unavailable):
        app_host.check_run(name="ci", head_sha=repo.git.head("main"), status="queued")

    assert [c for c in github.calls() if c.startswith(POST_CHECK)] == [f"{POST_CHECK} 0"]
    assert repo.checks == {}


def test_a_host_that_does_not_answer_in_time_is_unavailable(
    github, repo, installation, settings, monkeypatch
):
    monkeypatch.setenv(KEY_ENV, app_key()[0])
    project = project_on(
        github, settings, app_id=APP_ID, installation_id=installation.id, private_key_env=KEY_ENV
    )
    host = provider_for(project, timeout=0.5, retries=0)
    github.fail("timeout", match=GET_REPO)

    with pytest.raises(Unavailable) as down:
        host.repository()

    assert down.value.detail == "the code host did not answer within 0.5 s"


def test_a_host_that_cannot_be_reached_is_unavailable(github):
    from codehosts.providers.github import GitHubHost

    github.stop()
    host = GitHubHost(api_url=github.url, repository="octo-org/widgets", token="t", retries=0)

    with pytest.raises(Unavailable) as down:
        host.repository()

    assert down.value.detail == "the code host could not be reached"


def test_an_installation_token_that_expires_mid_batch_is_renewed(
    github, repo, installation, app_host
):
    for number in (1, 2):
        repo.issues[number] = Issue(
            number, f"I_{number}", f"Issue {number}", "", ["factory"], "ann"
        )

    first = app_host.issue(1)
    expired = github.world.expire_installation_tokens()
    second = app_host.issue(2)

    assert (first.number, second.number, expired) == (1, 2, 1)
    minted = f"POST /app/installations/{installation.id}/access_tokens 201"
    assert github.calls().count(minted) == 2
    assert "GET /repos/octo-org/widgets/issues/2 401" in github.calls()


def test_the_apps_previous_key_is_used_while_the_key_is_rotated(
    github, repo, installation, settings, monkeypatch
):
    github.world.public_keys = [app_key("previous")[1]]
    monkeypatch.setenv(KEY_ENV, app_key()[0])
    monkeypatch.setenv(f"{KEY_ENV}_PREVIOUS", app_key("previous")[0])
    project = project_on(
        github, settings, app_id=APP_ID, installation_id=installation.id, private_key_env=KEY_ENV
    )

    assert provider_for(project).repository().full_name == "octo-org/widgets"
    assert github.calls()[:2] == [
        f"POST /app/installations/{installation.id}/access_tokens 401",
        f"POST /app/installations/{installation.id}/access_tokens 201",
    ]


def test_an_installation_missing_permissions_has_each_named(github, repo, installation, app_host):
    installation.permissions.update(pull_requests="read", administration=None)
    del installation.permissions["checks"]
    installation.permissions = {k: v for k, v in installation.permissions.items() if v}

    assert app_host.check_access() == Access(
        ("administration: read", "checks: write", "pull_requests: write")
    )


def test_an_installation_with_every_permission_misses_nothing(repo, app_host):
    assert app_host.check_access() == Access()


def test_a_merge_queue_needs_the_merge_queue_permission(repo, installation, app_host):
    from tests.github_standin.world import Protection

    repo.protect("main", Protection([], merge_queue=True))
    del installation.permissions["merge_queues"]

    assert app_host.check_access().missing == ("merge_queues: write",)


def test_an_installation_that_does_not_include_the_repository_says_so(
    github, repo, installation, app_host
):
    installation.repositories = ["octo-org/other"]

    assert app_host.check_access().missing == (
        "repository: octo-org/widgets is not in the installation",
    )


def test_a_token_with_too_few_permissions_has_each_named(github, repo, settings, monkeypatch):
    token = github.world.personal_token("ann", scopes="public_repo", push=False)
    monkeypatch.setenv(TOKEN_ENV, token)
    host = provider_for(project_on(github, settings, token_env=TOKEN_ENV))

    assert host.check_access().missing == (
        "scope: repo",
        "contents: write",
        "administration: read",
    )


def test_no_secret_reaches_a_log_line_or_an_exception(
    github, repo, installation, settings, monkeypatch, caplog
):
    caplog.set_level(logging.DEBUG)
    key = app_key()[0]
    monkeypatch.setenv(KEY_ENV, key)
    project = project_on(
        github, settings, app_id=APP_ID, installation_id=installation.id, private_key_env=KEY_ENV
    )
    host = provider_for(project, backoff=0, sleep=lambda s: None)
    github.fail("502", count=1, match=GET_REPO)
    texts = [repr(host), str(host.repository())]
    github.world.expire_installation_tokens()
    del installation.permissions["checks"]
    for call in (
        lambda: host.check_run(name="x", head_sha=repo.git.head("main"), status="queued"),
        lambda: host.issue(99),
    ):
        with pytest.raises(Exception) as failed:
            call()
        texts += [str(failed.value), repr(failed.value), failed.value.detail]
    token = github.world.personal_token("ann")
    monkeypatch.setenv(TOKEN_ENV, token)
    github.world.tokens.pop(token)  # the host no longer takes it
    with pytest.raises(Forbidden) as refused:
        provider_for(project_on(github, settings, token_env=TOKEN_ENV)).repository()
    texts += [str(refused.value), repr(refused.value)]

    secrets = [key.splitlines()[1], token, *github.world.tokens]
    said = "\n".join(texts) + caplog.text
    assert [s for s in secrets if s in said] == []
    assert "Bad credentials (401)" in texts


def test_a_variable_the_process_does_not_set_is_named_and_nothing_else(
    github, settings, monkeypatch
):
    monkeypatch.delenv(TOKEN_ENV, raising=False)

    with pytest.raises(Unconfigured) as unset:
        provider_for(project_on(github, settings, token_env=TOKEN_ENV))

    assert unset.value.detail == f"this process does not set {TOKEN_ENV}"
    assert github.calls() == []


def test_an_api_base_the_operator_no_longer_lists_is_not_called(github, settings, monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, "t")
    project = project_on(github, settings, token_env=TOKEN_ENV)
    settings.FACTORY_CODE_HOST_URLS = ["https://api.github.com"]

    with pytest.raises(Unconfigured):
        provider_for(project)

    assert github.calls() == []


def test_no_code_host_keeps_todays_behaviour():
    from projects.models import Project

    host = provider_for(Project(slug="WID"))

    assert isinstance(host, NoHost)
    assert (host.check_access(), host.issues_with_label("factory")) == (Access(), [])
    with pytest.raises(Unconfigured) as refused:
        host.open_or_update_pull_request(
            task="WID-1", head="a", base="main", title="t", body="", draft=True
        )
    assert refused.value.detail == "this project has no code host to open a pull request on"


def test_the_web_process_routes_without_loading_githubkit():
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django, os, sys; os.environ.setdefault('DJANGO_SETTINGS_MODULE', "
            "'factory_site.settings_test'); django.setup(); import factory_site.urls; "
            "from django.urls import resolve; resolve('/hooks/github/'); "
            "print(sorted(m for m in sys.modules if m.startswith('githubkit')))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )

    assert loaded.stdout.strip() == "[]"
