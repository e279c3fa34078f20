"""Flaky tests on the merge queue's faces: the landing page, its forms, the API, /metrics."""

from datetime import timedelta

import pytest
from django.utils import timezone

from landing.models import Batch, BatchState, FlakyTest
from landing.settling import settle_dead_batches
from projects.metrics import INSTRUMENTS
from projects.models import Event
from tests.landing.conftest import queued

pytestmark = pytest.mark.django_db

TEST = "tests/test_calc.py::CalcTest::test_add"
URL = "/api/v1/projects/FM/landing/flaky/"


def flaked(flow, test=TEST, **fields):
    now = timezone.now()
    return FlakyTest.objects.create(
        project=flow.project,
        test=test,
        flakes=3,
        trees=["t" * 40],
        first_seen=now,
        last_seen=now,
        **fields,
    )


def quarantine_state():
    return (
        list(FlakyTest.objects.values_list("test", "quarantined", "reason").order_by("test")),
        Event.objects.count(),
    )


def test_the_page_shows_the_flake_rate_and_each_flaky_test(client, lands):
    Batch.objects.create(
        project=lands.project,
        state=BatchState.LANDED,
        target="main",
        method="squash",
        verify_runs=5,
        reruns=1,
        flaked=1,
        flaky=[TEST],
    )
    flaked(lands)
    flaked(lands, "tests/test_x.py::X::test_y", quarantined=True, reason="leap days")
    client.force_login(lands.agent)

    html = client.get("/projects/FM/landing/").content.decode()

    assert "flake rate 25% (1 of 4 trees judged); 1 quarantined" in html
    assert f'data-flaky="{TEST}"' in html
    assert "by the project's rule: leap days" in html
    assert "1 again" in html  # the batch's rerun
    assert 'action="/projects/FM/landing/flaky/"' not in html  # an agent gets no form


def test_a_manager_quarantines_from_the_page_and_the_page_says_so(client, lands):
    flaked(lands)
    client.force_login(lands.manager)

    response = client.post(
        "/projects/FM/landing/flaky/",
        {"test": TEST, "quarantined": "true", "reason": "FM-9 fixes it"},
        follow=True,
    )

    assert response.redirect_chain == [("/projects/FM/landing/", 302)]
    assert f"{TEST} is quarantined: its failures neither block nor blame." in (
        response.content.decode()
    )
    row = FlakyTest.objects.get(test=TEST)
    assert (row.quarantined, row.quarantined_by, row.reason) == (
        True,
        lands.manager,
        "FM-9 fixes it",
    )


def test_a_reviewer_cannot_quarantine_from_the_page_and_nothing_changes(client, lands):
    flaked(lands)
    before = quarantine_state()
    client.force_login(lands.reviewer)

    response = client.post(
        "/projects/FM/landing/flaky/",
        {"test": TEST, "quarantined": "true", "reason": "mine"},
        follow=True,
    )

    assert "The test was not quarantined: this needs the manager role in the project" in (
        response.content.decode()
    )
    assert quarantine_state() == before


def test_a_quarantine_without_a_reason_says_why_and_changes_nothing(client, lands):
    flaked(lands)
    before = quarantine_state()
    client.force_login(lands.manager)

    response = client.post(
        "/projects/FM/landing/flaky/", {"test": TEST, "quarantined": "true"}, follow=True
    )

    assert "say why the test is quarantined" in response.content.decode()
    assert quarantine_state() == before


def test_members_read_the_flaky_tests_through_the_api(api, lands):
    flaked(lands, quarantined=True, reason="leap days", quarantined_by=lands.manager)

    body = api(lands.agent).get(URL).json()

    assert (body["count"], body["quarantined"], body["rate"]) == (1, 1, None)
    (row,) = body["tests"]
    assert {k: row[k] for k in ("test", "flakes", "quarantined", "quarantined_by", "reason")} == {
        "test": TEST,
        "flakes": 3,
        "quarantined": True,
        "quarantined_by": lands.manager.username,
        "reason": "leap days",
    }


def test_a_manager_quarantines_through_the_api(api, lands):
    response = api(lands.manager).post(
        URL, {"test": TEST, "quarantined": True, "reason": "flaky on CI"}, format="json"
    )

    assert response.status_code == 200
    assert (response.json()["quarantined"], response.json()["flakes"]) == (True, 0)
    assert Event.objects.get(transition="quarantine").reason == "flaky on CI"


def test_a_manager_of_another_project_finds_no_quarantine_here(api, lands, other_flow):
    flaked(lands)
    before = quarantine_state()

    response = api(other_flow.manager).post(
        URL, {"test": TEST, "quarantined": True, "reason": "theirs"}, format="json"
    )

    assert response.status_code == 404
    assert quarantine_state() == before


@pytest.mark.parametrize(
    "body, status, code",
    [
        ({"test": TEST, "quarantined": True}, 400, "invalid"),
        ({"test": TEST, "quarantined": "maybe", "reason": "x"}, 400, "invalid"),
        ({"test": "", "quarantined": True, "reason": "x"}, 400, "invalid"),
        ({"test": TEST, "quarantined": False}, 400, "invalid"),
        ({"test": "a\u0001b", "quarantined": True, "reason": "x"}, 400, "invalid"),
        ({"test": TEST, "quarantined": False, "reason": "fixed"}, 409, "not_quarantined"),
    ],
)
def test_a_bad_quarantine_through_the_api_says_why_and_changes_nothing(
    api, lands, body, status, code
):
    flaked(lands)
    before = quarantine_state()

    response = api(lands.manager).post(URL, body, format="json")

    assert (response.status_code, response.json()["code"]) == (status, code)
    assert quarantine_state() == before


def test_metrics_count_the_quarantined_tests_by_project(client, lands, settings):
    settings.FACTORY_METRICS_TOKEN = "t" * 40
    flaked(lands, quarantined=True, reason="x")
    flaked(lands, "tests/test_x.py::X::test_y")

    text = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {'t' * 40}").content.decode()

    assert 'factory_landing_quarantined{project="FM"} 1.0' in text


def test_metrics_show_the_queues_health_oldest_wait_batches_and_runs(
    client, lands, settings, django_capture_on_commit_callbacks
):
    settings.FACTORY_METRICS_TOKEN = "t" * 40
    _, attempt = queued(lands)
    type(attempt).objects.filter(pk=attempt.pk).update(
        queued_at=timezone.now() - timedelta(hours=2)
    )
    labels = {"project": "FM", "state": "abandoned"}
    before = INSTRUMENTS.get_sample_value("factory_landing_batches_total", labels) or 0
    runs = INSTRUMENTS.get_sample_value("factory_landing_verify_runs_total", {"project": "FM"})
    Batch.objects.create(
        project=lands.project, state=BatchState.VERIFYING, target="main", method="squash",
        verify_runs=2, changes=[],
    )  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        settle_dead_batches(lands.project)

    text = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {'t' * 40}").content.decode()

    (line,) = [x for x in text.splitlines() if x.startswith("factory_landing_oldest_queued")]
    assert 7200 <= float(line.split()[-1]) < 7300
    assert INSTRUMENTS.get_sample_value("factory_landing_batches_total", labels) == before + 1
    after = INSTRUMENTS.get_sample_value("factory_landing_verify_runs_total", {"project": "FM"})
    assert after == (runs or 0) + 2
