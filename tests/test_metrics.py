"""/metrics: Prometheus text for the bearer of FACTORY_METRICS_TOKEN only, and each
``factory_`` figure moving by exactly what happened (docs/operations.md)."""

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import transaction
from prometheus_client.parser import text_string_to_metric_families

from events import services as event_services
from events.models import Delivery
from evidence import services as gate_services
from evidence.selectors import gate_run_figures
from projects import metrics
from tasks import attempts, review
from tasks.landing import task_dequeue, task_land, task_landing_return
from tasks.models import TaskState
from tasks.selectors import metric_figures
from tests.events.conftest import Receiver
from tests.factories import all_met, expire_lease

TOKEN = "metrics-token-for-the-tests"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def scrape(client, settings):
    """``scrape()``: ``{(sample name, frozenset of labels): value}`` from /metrics."""
    settings.FACTORY_METRICS_TOKEN = TOKEN

    def read() -> dict:
        answer = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
        assert answer.status_code == 200
        return {
            (sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(answer.content.decode())
            for sample in family.samples
        }

    return read


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def moved(before: dict, after: dict, name: str, **labels) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


# --- Who may read it -------------------------------------------------------------------


def test_metrics_is_a_404_while_the_token_is_unset(client, settings):
    settings.FACTORY_METRICS_TOKEN = ""

    for header in ({}, {"HTTP_AUTHORIZATION": "Bearer "}, {"HTTP_AUTHORIZATION": "Bearer x"}):
        assert client.get("/metrics", **header).status_code == 404


@pytest.mark.parametrize(
    "header",
    [
        None,
        "Bearer wrong",
        f"Bearer {TOKEN}x",
        f"Bearer {TOKEN[:-1]}",
        TOKEN,
        f"bearer {TOKEN}",
        f"Token {TOKEN}",
        "Bearer ",
    ],
)
def test_a_missing_or_wrong_token_is_a_404(client, settings, header):
    settings.FACTORY_METRICS_TOKEN = TOKEN

    answer = client.get("/metrics", **({"HTTP_AUTHORIZATION": header} if header else {}))

    assert answer.status_code == 404
    assert b"factory_" not in answer.content


def test_the_token_gets_every_family_as_prometheus_text_without_a_session(client, settings, db):
    settings.FACTORY_METRICS_TOKEN = TOKEN

    answer = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")

    assert answer.status_code == 200
    assert answer["Content-Type"].startswith("text/plain; version=")
    assert "sessionid" not in answer.cookies
    families = {f.name for f in text_string_to_metric_families(answer.content.decode())}
    defined = {family.name for family in metrics.INSTRUMENTS.collect()} | set(metrics.GAUGES)
    assert families == defined
    assert all(name.startswith("factory_") for name in families)


# --- Claims ------------------------------------------------------------------------------


def test_a_claim_counts_one_claim_for_its_project(flow, scrape, django_capture_on_commit_callbacks):
    flow.ready()
    before = scrape()

    with django_capture_on_commit_callbacks(execute=True):
        attempts.task_claim(agent=flow.agent, project=flow.project)

    after = scrape()
    assert moved(before, after, "factory_claims_total", project="FM") == 1
    assert moved(before, after, "factory_claim_refusals_total", reason="nothing_claimable") == 0


def test_a_refused_claim_counts_its_reason_and_no_claim(flow, api, scrape):
    flow.ready()
    before = scrape()

    refused = api(flow.reviewer).post("/api/v1/tasks/claim/", {}, format="json")
    empty = api(flow.agent).post("/api/v1/tasks/claim/", {"labels": ["none"]}, format="json")

    after = scrape()
    assert (refused.status_code, empty.status_code) == (403, 204)
    assert moved(before, after, "factory_claim_refusals_total", reason="permission_denied") == 1
    assert moved(before, after, "factory_claim_refusals_total", reason="nothing_claimable") == 1
    assert moved(before, after, "factory_claims_total", project="FM") == 0


def test_a_claim_rolled_back_is_not_counted(flow, scrape, django_capture_on_commit_callbacks):
    flow.ready()
    before = scrape()

    with (
        django_capture_on_commit_callbacks(execute=True),
        pytest.raises(RuntimeError),
        transaction.atomic(),
    ):
        attempts.task_claim(agent=flow.agent, project=flow.project)
        raise RuntimeError("the caller's transaction fails after the claim")

    assert moved(before, scrape(), "factory_claims_total", project="FM") == 0


# --- Gates, leases, landing, webhooks --------------------------------------------------------


def test_a_finished_gate_run_counts_its_gate_and_verdict_and_is_timed(
    flow, scrape, django_capture_on_commit_callbacks
):
    flow.gates({"tests-pass": {}})
    _, attempt = flow.checking()
    [run] = attempt.gate_runs.all()
    gate_services.gate_run_start(run=run)
    before = scrape()

    with django_capture_on_commit_callbacks(execute=True):
        gate_services.gate_run_finish(run=run, outcome="failed", verdict={}, summary="1 failed")
        gate_services.gate_run_finish(run=run, outcome="failed", verdict={}, summary="again")

    after = scrape()
    assert moved(before, after, "factory_gate_runs_total", gate="tests-pass", verdict="failed") == 1
    assert moved(before, after, "factory_gate_runs_total", gate="tests-pass", verdict="passed") == 0
    assert moved(before, after, "factory_gate_run_seconds_count", gate="tests-pass") == 1


def test_an_expired_lease_is_counted_once_for_its_project(
    flow, scrape, django_capture_on_commit_callbacks
):
    _, attempt = flow.claimed()
    expire_lease(attempt)
    before = scrape()

    with django_capture_on_commit_callbacks(execute=True):
        assert attempts.leases_expire_overdue() == 1
        assert attempts.leases_expire_overdue() == 0

    assert moved(before, scrape(), "factory_lease_expiries_total", project="FM") == 1


@pytest.fixture
def queued(flow):
    flow.project.repository_url = "https://git.example.org/fm.git"
    flow.project.verify = {"test": "true", "junit": "junit.xml"}
    flow.project.landing = {"mode": "push", "method": "squash", "batch_max": 4, "target_branch": ""}
    flow.project.save()

    def make():
        task, attempt = flow.in_review()
        review.task_approve(task=task, actor=flow.reviewer, criteria=all_met(attempt))
        attempt.refresh_from_db()
        return attempt

    return make


def test_each_way_out_of_the_landing_queue_is_counted_and_a_landing_is_timed(
    queued, flow, scrape, django_capture_on_commit_callbacks
):
    landed, returned, dequeued = queued(), queued(), queued()
    before = scrape()
    assert value(before, "factory_landing_queued", project="FM") == 3

    with django_capture_on_commit_callbacks(execute=True):
        task_land(attempt=landed, commit="f" * 40, batch=1, seconds=1.0)
        task_land(attempt=landed, commit="f" * 40, batch=1, seconds=1.0)  # twice: once
        task_landing_return(attempt=returned, state="conflict", reason="calc.py")
        task_dequeue(task=dequeued.task, actor=flow.manager, to="ready", reason="not now")

    after = scrape()
    for outcome in ("landed", "conflict", "dequeued"):
        assert moved(before, after, "factory_landings_total", project="FM", outcome=outcome) == 1
    assert moved(before, after, "factory_landings_total", project="FM", outcome="failed") == 0
    assert moved(before, after, "factory_landing_wait_seconds_count", project="FM") == 1
    assert value(after, "factory_landing_queued", project="FM") == 0


@pytest.fixture
def receiver():
    receiver = Receiver()
    yield receiver
    receiver.server.shutdown()


def test_webhook_tries_are_counted_by_outcome_and_a_delivery_is_timed(
    flow, receiver, scrape, settings, django_capture_on_commit_callbacks
):
    settings.FACTORY_WEBHOOK_RETRY_SCHEDULE = [1]
    event_services.subscription_create(
        project=flow.project, actor=flow.manager, url=receiver.url, types=["task.published"]
    )
    before = scrape()

    with django_capture_on_commit_callbacks(execute=True):
        flow.ready()  # delivered on commit
    receiver.status = 500
    with django_capture_on_commit_callbacks(execute=True):
        flow.ready()  # refused: one retry left
    delivery = Delivery.objects.get(status="pending")
    with django_capture_on_commit_callbacks(execute=True):
        event_services.delivery_try(delivery_id=delivery.pk)  # refused again: failed

    after = scrape()
    for outcome in ("delivered", "retry", "failed"):
        assert moved(before, after, "factory_webhook_deliveries_total", outcome=outcome) == 1
    assert moved(before, after, "factory_webhook_lag_seconds_count") == 1


def test_a_runner_verdict_is_counted_and_timed(scrape, db, django_capture_on_commit_callbacks):
    before = scrape()

    with django_capture_on_commit_callbacks(execute=True):
        metrics.runner_finished(passed=False, seconds=2.5)  # runner.verify's call after a run

    after = scrape()
    assert moved(before, after, "factory_runner_verdicts_total", verdict="failed") == 1
    # A sum: other tests in this process may have added to it first, so not exactly 2.5.
    seconds = moved(before, after, "factory_runner_seconds_sum", verdict="failed")
    assert seconds == pytest.approx(2.5)


# --- Requests ------------------------------------------------------------------------------


def test_an_api_request_is_counted_by_its_routes_name_never_its_path(flow, api, scrape):
    task = flow.ready()
    before = scrape()

    answer = api(flow.manager).get(f"/api/v1/tasks/{task.key}/")
    api(flow.manager).generic("BREW", f"/api/v1/tasks/{task.key}/")

    after = scrape()
    assert answer.status_code == 200
    labels = {"route": "api-task", "method": "GET", "status": "200"}
    assert moved(before, after, "factory_http_requests_total", **labels) == 1
    assert (
        moved(before, after, "factory_http_request_seconds_count", route="api-task", method="GET")
        == 1
    )
    assert (
        moved(
            before,
            after,
            "factory_http_requests_total",
            route="api-task",
            method="other",
            status="405",
        )
        == 1
    )
    assert not any(task.key in label for _, labels in after for _, label in labels)


def test_an_address_no_route_matches_is_counted_as_unmatched(client, scrape, db):
    before = scrape()

    assert client.get("/no/such/FM-1/page/").status_code == 404

    labels = {"route": "unmatched", "method": "GET", "status": "404"}
    assert moved(before, scrape(), "factory_http_requests_total", **labels) == 1


# --- The gauges read at scrape time ----------------------------------------------------------


def test_the_tasks_gauge_counts_each_state_of_each_project_exactly(flow, other_flow, scrape):
    flow.claimed(), flow.in_review(), flow.ready(), flow.ready(), flow.draft()
    other_flow.ready()

    after = scrape()

    expected = {state: 0 for state in TaskState.values}
    expected.update({"ready": 2, "claimed": 1, "in_review": 1, "draft": 1})
    assert {s: value(after, "factory_tasks", project="FM", state=s) for s in expected} == expected
    assert value(after, "factory_tasks", project="OT", state="ready") == 1
    assert value(after, "factory_tasks", project="OT", state="in_review") == 0


def test_the_review_queue_is_as_old_as_its_oldest_submission(flow, django_assert_num_queries):
    _, older = flow.in_review()
    flow.in_review()
    now = older.submitted_at + timedelta(hours=3)

    with django_assert_num_queries(1):
        figures = metric_figures(now=now)

    assert figures["factory_review_oldest_seconds"] == {("FM",): 3 * 3600.0}
    assert figures["factory_landing_queued"] == {("FM",): 0}


def test_unfinished_gate_runs_are_counted_with_the_oldest_ones_wait(flow):
    flow.gates({"tests-pass": {}, "diff-scope": {}})
    _, attempt = flow.checking()
    run = attempt.gate_runs.get(gate="tests-pass")
    gate_services.gate_run_start(run=run)
    run.refresh_from_db()
    queued = attempt.gate_runs.get(gate="diff-scope")

    figures = gate_run_figures(now=run.started_at + timedelta(minutes=10))

    assert figures["factory_gate_runs_unfinished"] == {
        ("tests-pass", "running"): 1,
        ("diff-scope", "queued"): 1,
    }
    assert figures["factory_gate_run_oldest_seconds"][("tests-pass", "running")] == 600.0
    assert (
        figures["factory_gate_run_oldest_seconds"][("diff-scope", "queued")]
        == (run.started_at + timedelta(minutes=10) - queued.queued_at).total_seconds()
    )


# --- Many processes ------------------------------------------------------------------------


def test_processes_sharing_a_multiprocess_directory_add_up(tmp_path, monkeypatch):
    count = (
        "from projects import metrics;"
        "metrics.request_answered(route='api-task', method='GET', status=200, seconds=0.5)"
    )
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    workers = [subprocess.Popen([sys.executable, "-c", count], cwd=ROOT, env=env) for _ in "ab"]
    assert [worker.wait(timeout=60) for worker in workers] == [0, 0]
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))

    text = metrics.render({}).decode()

    samples = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    labels = {"route": "api-task", "method": "GET", "status": "200"}
    assert value(samples, "factory_http_requests_total", **labels) == 2
    assert value(samples, "factory_http_request_seconds_sum", route="api-task", method="GET") == 1.0
