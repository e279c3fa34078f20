"""A project's runner settings: its repository, default branch and verify block.

Set through the one service (API, admin), validated with a 400 that names the field,
and recorded as an Event; a refusal changes nothing.
"""

import socket

import pytest

from projects.models import Event
from projects.verify import check_repository_location

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
        "cache_keys": ["uv.lock", "requirements*.txt", "package-lock.json", "go.sum"],
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
        ({"verify": {**VERIFY, "cache_keys": "uv.lock"}}, {"verify.cache_keys"}),
        ({"verify": {**VERIFY, "cache_keys": ["../uv.lock"]}}, {"verify.cache_keys"}),
        ({"verify": {**VERIFY, "cache_keys": ["/etc/passwd"]}}, {"verify.cache_keys"}),
        ({"verify": {**VERIFY, "cache_keys": ["*/go.sum"]}}, {"verify.cache_keys"}),
        ({"verify": {**VERIFY, "cache_keys": ["go.sum"] * 21}}, {"verify.cache_keys"}),
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


def refused(api, flow, url):
    """PATCH ``url`` as the manager; the answer, after asserting nothing changed."""
    before = Event.objects.count()
    response = patch(api, flow, repository_url=url)
    flow.project.refresh_from_db()
    assert (flow.project.repository_url, Event.objects.count()) == ("", before)
    return response


@pytest.mark.parametrize(
    "through",
    ["/proc/self/root", "file:///proc/self/root", "/proc/1/root", "/proc/thread-self/root"],
)
def test_a_repository_through_proc_is_refused(flow, api, settings, through):
    mirror = f"{through}{settings.FACTORY_RUNNER_ROOT}/mirrors/1.git"

    response = refused(api, flow, mirror)

    assert response.status_code == 409
    assert response.json() == {
        "detail": f"{mirror} leads into /proc, /sys or /dev; a local repository may not",
        "code": "repository_not_allowed",
    }


def test_a_link_into_the_runners_mirrors_is_refused_by_where_it_leads(
    flow, api, settings, tmp_path
):
    settings.FACTORY_RUNNER_ROOT = tmp_path / "runner"
    (tmp_path / "runner" / "mirrors" / "1.git").mkdir(parents=True)
    (tmp_path / "innocent.git").symlink_to(tmp_path / "runner" / "mirrors" / "1.git")

    response = refused(api, flow, f"file://{tmp_path}/innocent.git")

    assert response.status_code == 409
    assert response.json()["detail"] == (
        f"file://{tmp_path}/innocent.git is one of the server's own directories; "
        "a local repository may not be"
    )


def test_a_local_repository_outside_the_allowed_roots_is_refused(flow, api, settings, tmp_path):
    settings.FACTORY_LOCAL_REPOSITORY_ROOTS = [str(tmp_path / "repositories")]

    response = refused(api, flow, "/srv/elsewhere.git")

    assert response.status_code == 409
    assert response.json()["detail"] == (
        "/srv/elsewhere.git is not under a directory this site keeps repositories in "
        f"({tmp_path}/repositories)"
    )


def test_with_no_allowed_roots_only_the_sites_own_repositories_are_local(
    flow, api, settings, tmp_path
):
    settings.FACTORY_LOCAL_REPOSITORY_ROOTS = []
    settings.FACTORY_RUNNER_ROOT = tmp_path / "runner"
    hosted = f"file://{tmp_path}/runner/repositories/demo"

    outside = refused(api, flow, f"file://{tmp_path}/repo.git")
    inside = patch(api, flow, repository_url=hosted)

    assert outside.json()["detail"] == (
        f"file://{tmp_path}/repo.git is a local path, "
        "and this site fetches from network repositories only"
    )
    assert (inside.status_code, inside.json()["repository_url"]) == (200, hosted)


def test_a_local_repository_serves_one_project(flow, other_flow, api, tmp_path):
    (tmp_path / "rd.git").mkdir()
    (tmp_path / "alias.git").symlink_to(tmp_path / "rd.git")
    assert patch(api, flow, repository_url=f"file://{tmp_path}/rd.git").status_code == 200
    before = Event.objects.count()

    response = api(other_flow.manager).patch(
        f"/api/v1/projects/{other_flow.project.slug}/",
        {"repository_url": f"{tmp_path}/alias.git"},
        format="json",
    )

    assert response.status_code == 409
    assert response.json() == {
        "detail": f"{tmp_path}/alias.git is another project's repository; "
        "a local repository serves one project",
        "code": "repository_in_use",
    }
    other_flow.project.refresh_from_db()
    assert (other_flow.project.repository_url, Event.objects.count()) == ("", before)


def resolving(monkeypatch, *answers):
    """Make every name resolve to ``answers`` in turn (the last one stays)."""
    calls = []

    def getaddrinfo(host, port, *args, **kwargs):
        calls.append(host)
        address = answers[min(len(calls), len(answers)) - 1]
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return calls


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8699/internal-admin/repo.git",
        "https://git.internal.example/repo.git",
        "git://git.internal.example/repo.git",
        "ssh://git@git.internal.example/repo.git",
        "git@git.internal.example:repo.git",
    ],
)
@pytest.mark.parametrize(
    "address", ["127.0.0.1", "10.0.0.7", "169.254.169.254", "::ffff:127.0.0.1"]
)
def test_a_repository_inside_the_network_is_refused_for_every_transport(
    flow, api, settings, monkeypatch, url, address
):
    settings.FACTORY_REPOSITORY_ALLOW_PRIVATE = False
    resolving(monkeypatch, address)

    response = refused(api, flow, url)

    assert response.status_code == 409
    assert response.json()["code"] == "repository_not_allowed"
    assert response.json()["detail"].endswith(
        f"resolves to {address}, an address inside the network; "
        "repositories are reached at public addresses only"
    )


@pytest.mark.parametrize("url", ["ssh://host]x/repo.git", "https://[::1/repo.git"])
def test_a_repository_url_whose_host_cannot_be_read_is_409_and_changes_nothing(flow, api, url):
    # urlsplit raises "Invalid IPv6 URL" on a lone bracket: once a 500 (schemathesis).
    response = refused(api, flow, url)

    assert response.status_code == 409
    assert response.json() == {
        "detail": f"{url} names no host this site can read",
        "code": "repository_not_allowed",
    }


def test_a_public_repository_is_fetched_at_the_address_that_was_checked(settings, monkeypatch):
    settings.FACTORY_REPOSITORY_ALLOW_PRIVATE = False
    resolving(monkeypatch, "93.184.216.34")

    https = check_repository_location("https://git.example.org/fm.git")
    native = check_repository_location("git://git.example.org/fm.git")

    assert https == [
        "-c",
        "http.followRedirects=false",
        "-c",
        "http.curloptResolve=git.example.org:443:93.184.216.34",
    ]
    assert native[-1] == "url.git://93.184.216.34:9418/.insteadOf=git://git.example.org/"
