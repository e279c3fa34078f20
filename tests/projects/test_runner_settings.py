"""A project's runner settings: its repository, default branch and verify block.

Set through the one service (API, admin), validated with a 400 that names the field,
and recorded as an Event; a refusal changes nothing.
"""

import pytest

from projects.models import Event

VERIFY = {"test": "python3 run_tests.py", "junit": "reports/junit.xml"}


def patch(api, flow, **body):
    return api(flow.manager).patch(f"/api/v1/projects/{flow.project.slug}/", body, format="json")


def test_a_manager_sets_the_runner_and_it_is_on_record_with_its_defaults(flow, api):
    response = patch(
        api,
        flow,
        repository_url="https://git.example.org/fm.git",
        default_branch="trunk",
        verify=VERIFY,
        gate_policy={"runner": {"required": True}, "tests-pass": {}},
    )

    assert response.status_code == 200
    body = response.json()
    assert (body["repository_url"], body["default_branch"]) == (
        "https://git.example.org/fm.git",
        "trunk",
    )
    assert body["verify"] == {
        "setup": [],
        "test": "python3 run_tests.py",
        "junit": "reports/junit.xml",
        "coverage": None,
        "timeout_seconds": 600,
        "memory_mb": 2048,
        "output_limit_bytes": 4194304,
        "setup_network": False,
    }
    event = Event.objects.filter(transition="edit").latest("id")
    assert event.extra["fields"] == ["default_branch", "gate_policy", "repository_url", "verify"]
    assert event.extra["verify"] == body["verify"]


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        ({"repository_url": "ext::sh -c touch% /tmp/pwned"}, {"repository_url"}),
        ({"repository_url": "-uhelp"}, {"repository_url"}),
        ({"repository_url": "ftp://example.org/x.git"}, {"repository_url"}),
        ({"repository_url": "file:///work/../etc"}, {"repository_url"}),
        ({"repository_url": "file://relative/repo"}, {"repository_url"}),
        ({"repository_url": "https://example.org/a repo.git"}, {"repository_url"}),
        ({"default_branch": "../main"}, {"default_branch"}),
        ({"default_branch": "-f"}, {"default_branch"}),
        ({"verify": {"junit": "reports/junit.xml"}}, {"verify.test"}),
        ({"verify": {**VERIFY, "junit": "../junit.xml"}}, {"verify.junit"}),
        ({"verify": {**VERIFY, "junit": "/tmp/junit.xml"}}, {"verify.junit"}),
        ({"verify": {**VERIFY, "timeout_seconds": 0}}, {"verify.timeout_seconds"}),
        ({"verify": {**VERIFY, "memory_mb": True}}, {"verify.memory_mb"}),
        ({"verify": {**VERIFY, "setup": "make"}}, {"verify.setup"}),
        ({"verify": {**VERIFY, "setup": [""]}}, {"verify.setup[0]"}),
        ({"verify": {**VERIFY, "network": True}}, {"verify.network"}),
        ({"verify": "make test"}, {"verify"}),
        ({"verify": {**VERIFY, "junit": "reports/./junit.xml"}}, {"verify.junit"}),
        ({"verify": {**VERIFY, "test": "   "}}, {"verify.test"}),
    ],
)
def test_bad_runner_settings_are_400_naming_the_field_and_change_nothing(flow, api, body, errors):
    before = Event.objects.count()

    response = patch(api, flow, **body)

    assert response.status_code == 400
    assert set(response.json()["fields"]) == errors
    flow.project.refresh_from_db()
    assert (flow.project.repository_url, flow.project.default_branch, flow.project.verify) == (
        "",
        "main",
        {},
    )
    assert Event.objects.count() == before


def test_a_local_repository_may_not_be_the_servers_own_directory(flow, api, settings):
    response = patch(api, flow, repository_url=f"file://{settings.BASE_DIR}")

    assert response.status_code == 409
    assert response.json() == {
        "detail": f"file://{settings.BASE_DIR} is one of the server's own directories; "
        "a local repository may not be",
        "code": "repository_not_allowed",
    }
    flow.project.refresh_from_db()
    assert flow.project.repository_url == ""


def test_the_runner_gate_without_a_repository_and_verify_block_is_409_and_changes_nothing(
    flow, api
):
    before = Event.objects.count()

    response = patch(api, flow, gate_policy={"runner": {"required": True}})

    assert response.status_code == 409
    assert response.json() == {
        "detail": "the runner gate needs repository_url (the repository to fetch from) and "
        "verify (the test command and its JUnit path); set them with the policy or first",
        "code": "runner_unconfigured",
    }
    flow.project.refresh_from_db()
    assert "runner" not in flow.project.gate_policy
    assert Event.objects.count() == before


def test_only_managers_change_the_runner(flow, api):
    response = api(flow.agent).patch(
        f"/api/v1/projects/{flow.project.slug}/", {"verify": VERIFY}, format="json"
    )

    assert response.status_code == 403
    flow.project.refresh_from_db()
    assert flow.project.verify == {}
