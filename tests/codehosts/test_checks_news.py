"""The team's CI answering wakes the lander (issue 33, landing through the pull request):
between two looks at the required checks, the lander listens for the host's news of a
check or status on the commit it waits on, a webhook delivery the site kept, and looks at
once when there is some (``landing.through_host._listen``; docs/code-hosts.md).

The waits run on a clock of the test's (``Clock``): no test sleeps, and each asserts when
the lander looked.
"""

import hashlib
import hmac
import json
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.utils import timezone

from codehosts.landing import HostLanding
from codehosts.models import HostDelivery
from landing import through_host
from tests.factories import ProjectFactory

SECRET = "It's a Secret to Everybody"
HEAD, OTHER = "a" * 40, "b" * 40


class Clock:
    """``time`` for ``landing.through_host``: ``sleep`` moves ``monotonic`` on."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class TeamCI:
    """The host as the lander sees it: the team's check ``ci`` turns green at ``answers_at``
    on the clock, and the host's news of it is kept from then on if ``tells``."""

    def __init__(self, clock: Clock, answers_at: float, *, tells: bool):
        self.clock, self.answers_at, self.tells = clock, answers_at, tells
        self.looks: list[float] = []

    def checks(self, branch, commit):
        self.looks.append(self.clock.now)
        state = "success" if self.clock.now >= self.answers_at else "pending"
        return through_host.Checks(required=("ci",), states={"ci": state})

    def heard_of_checks(self, commit, *, since):
        return self.tells and self.clock.now >= self.answers_at


@pytest.fixture
def clock(monkeypatch, settings):
    settings.FACTORY_LANDING_CHECKS_TIMEOUT = 3600
    settings.FACTORY_LANDING_CHECKS_POLL_SECONDS = 15
    settings.FACTORY_LANDING_CHECKS_LISTEN_MS = 250
    clock = Clock()
    monkeypatch.setattr(
        through_host, "time", SimpleNamespace(monotonic=clock.monotonic, sleep=clock.sleep)
    )
    return clock


BATCH = SimpleNamespace(target="main", base="c" * 40)


def test_news_of_the_teams_check_wakes_the_lander_before_its_next_look(clock, settings):
    settings.FACTORY_LANDING_CHECKS_FIRST_LOOK_SECONDS = 8
    host = TeamCI(clock, answers_at=2.1, tells=True)

    through_host._wait_for_checks(host, BATCH, HEAD)

    # Woken at the first listen after the news (every 0.25 s), not at the 8 s look.
    assert host.looks == [0.0, 2.25]


def test_without_news_the_lander_looks_on_its_schedule(clock, settings):
    settings.FACTORY_LANDING_CHECKS_FIRST_LOOK_SECONDS = 1
    host = TeamCI(clock, answers_at=5, tells=False)

    through_host._wait_for_checks(host, BATCH, HEAD)

    assert host.looks == [0.0, 1.0, 3.0, 7.0]


def test_news_that_never_turns_the_check_green_still_ends_at_the_time_limit(clock, settings):
    settings.FACTORY_LANDING_CHECKS_TIMEOUT = 20
    settings.FACTORY_LANDING_CHECKS_FIRST_LOOK_SECONDS = 1
    host = TeamCI(clock, answers_at=3600, tells=False)

    with pytest.raises(through_host.GoesBack) as raised:
        through_host._wait_for_checks(host, BATCH, HEAD)

    assert host.looks == [0.0, 1.0, 3.0, 7.0, 15.0, 20.0]
    assert "still pending" in str(raised.value)


# --- the news, from the deliveries the site keeps -----------------------------------------


def payload(event: str, sha: str, repository: str, api_url: str) -> dict:
    """A delivery as GitHub sends it, cut to what is read."""
    body = {
        "status": {"sha": sha, "state": "success", "context": "ci"},
        "check_run": {"check_run": {"head_sha": sha, "status": "completed", "name": "ci"}},
        "check_suite": {"check_suite": {"head_sha": sha, "status": "completed"}},
    }[event]
    return {
        "action": "completed",
        **body,
        "repository": {"full_name": repository, "url": f"{api_url}/repos/{repository}"},
    }


def deliver(client, github, event: str, sha: str, *, delivery: str, repository="octo-org/widgets"):
    body = json.dumps(payload(event, sha, repository, github.url)).encode()
    signature = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    return client.post(
        "/hooks/github/",
        body,
        content_type="application/json",
        HTTP_X_GITHUB_EVENT=event,
        HTTP_X_GITHUB_DELIVERY=delivery,
        HTTP_X_HUB_SIGNATURE_256=signature,
    )


@pytest.mark.parametrize("event", ["status", "check_run", "check_suite"])
def test_a_check_delivery_is_news_of_its_commit_for_its_project_alone(
    hosted, github, client, monkeypatch, event
):
    monkeypatch.setenv("FACTORY_HOST_WIDGETS_HOOK", SECRET)
    before = timezone.now() - timedelta(seconds=1)
    landing = HostLanding(hosted.project)
    elsewhere = SimpleNamespace(project=ProjectFactory(slug="ELSE"))

    response = deliver(client, github, event, HEAD, delivery=f"{event}-1")

    assert response.status_code == 202
    assert HostDelivery.objects.get(delivery_id=f"{event}-1").event == event
    assert landing.heard_of_checks(HEAD, since=before) is True
    assert landing.heard_of_checks(OTHER, since=before) is False
    assert landing.heard_of_checks(HEAD, since=timezone.now() + timedelta(seconds=1)) is False
    assert HostLanding.heard_of_checks(elsewhere, HEAD, since=before) is False


def test_a_pull_request_delivery_is_no_news_of_a_check(hosted, github, client, monkeypatch):
    monkeypatch.setenv("FACTORY_HOST_WIDGETS_HOOK", SECRET)
    before = timezone.now() - timedelta(seconds=1)
    body = json.dumps(
        {
            "action": "synchronize",
            "pull_request": {"number": 1, "head": {"sha": HEAD}},
            "repository": {
                "full_name": "octo-org/widgets",
                "url": f"{github.url}/repos/octo-org/widgets",
            },
        }
    ).encode()
    signature = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()

    response = client.post(
        "/hooks/github/",
        body,
        content_type="application/json",
        HTTP_X_GITHUB_EVENT="pull_request",
        HTTP_X_GITHUB_DELIVERY="pr-1",
        HTTP_X_HUB_SIGNATURE_256=signature,
    )

    assert response.status_code == 202
    assert HostLanding(hosted.project).heard_of_checks(HEAD, since=before) is False
