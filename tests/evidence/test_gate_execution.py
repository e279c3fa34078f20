"""Running gates in-process (Celery is eager in tests) and the reconciler that finds lost work."""

import io
import json
import shutil
import threading
from datetime import timedelta

import pytest
from celery.exceptions import SoftTimeLimitExceeded
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection
from django.utils import timezone
from knox.models import AuthToken

from evidence import jobs, services, storage
from evidence.gates import Gate, Verdict
from evidence.models import Evidence, GateRun
from projects import queue
from projects.models import Event
from projects.policy import registry
from tasks import attempts, reconciler
from tasks import jobs as task_jobs
from tasks import services as task_services
from tasks.models import Task
from tests.conftest import postgres_only
from tests.evidence.test_gates import ALLOWED, git_diffs
from tests.factories import expire_lease

ZERO = {
    "leases_expired": 0,
    "gate_runs_requeued": 0,
    "gate_runs_redispatched": 0,
    "attempts_concluded": 0,
    "landers_woken": 0,
}
FLAKY_CALLS = {"count": 0}


class BoomGate(Gate):
    description = "Crashes every time it runs."

    def check(self, attempt, params, policy):
        raise RuntimeError("boom: the gate fell over")


class FlakyGate(Gate):
    description = "Crashes the first time, passes after that."

    def check(self, attempt, params, policy):
        FLAKY_CALLS["count"] += 1
        if FLAKY_CALLS["count"] == 1:
            raise ConnectionError("the artifact store blinked")
        return Verdict(True, "fine on a second look", {"calls": FLAKY_CALLS["count"]})


class SlowGate(Gate):
    description = "Overruns its time limit."

    def check(self, attempt, params, policy):
        raise SoftTimeLimitExceeded()


class QuotingGate(Gate):
    description = "Quotes the bytes it found in an artifact in its report, NUL included."

    def check(self, attempt, params, policy):
        return Verdict(False, "the log holds a NUL byte", {"line": 2}, "# quoting\n\nab\x00cd\n")


@pytest.fixture
def extra_gates(settings):
    """The gates above, registered through settings the way a site adds its own."""
    test_gates = {"boom": BoomGate, "flaky": FlakyGate, "slow": SlowGate, "quoting": QuotingGate}
    settings.FACTORY_EXTRA_GATES = {
        name: f"tests.evidence.test_gate_execution.{cls.__name__}"
        for name, cls in test_gates.items()
    }
    FLAKY_CALLS["count"] = 0
    registry.cache_clear()
    yield registry()
    registry.cache_clear()


@pytest.fixture(scope="module")
def diffs(tmp_path_factory):
    if shutil.which("git") is None:
        pytest.skip("needs git")
    return git_diffs(tmp_path_factory.mktemp("repo"))


def submit(attempt, capture=None):
    """Submit as the agent; with ``capture``, run the on-commit jobs (the gates) eagerly."""
    kwargs = {"attempt": attempt, "actor": attempt.agent, "summary": "done", "change": {}}
    if capture is None:
        return attempts.attempt_submit(**kwargs)
    with capture(execute=True):
        return attempts.attempt_submit(**kwargs)


def evidence_for(flow, attempt, reports, diffs, junit="passing"):
    flow.attach(attempt, reports[junit], kind="junit", name="junit.xml")
    flow.attach(attempt, diffs["inside"], kind="diff", name="change.diff")


def transitions_of(run):
    return list(
        Event.objects.filter(
            content_type=ContentType.objects.get_for_model(GateRun), object_id=run.pk
        )
        .order_by("id")
        .values_list("transition", flat=True)
    )


def content_of(evidence) -> str:
    with storage.open_blob(evidence.file.name) as handle:
        return handle.read().decode()


def states(task, attempt):
    task.refresh_from_db()
    attempt.refresh_from_db()
    return task.state, attempt.state


# --- Submit → gates → review ------------------------------------------------------------------


@pytest.mark.django_db
def test_a_good_submission_passes_its_gates_and_goes_to_review(
    flow, reports, diffs, django_capture_on_commit_callbacks
):
    flow.gates({"tests-pass": {}, "diff-scope": {}})
    task, attempt = flow.claimed(spec=flow.spec(), allowed_paths=ALLOWED)
    evidence_for(flow, attempt, reports, diffs)

    submit(attempt, django_capture_on_commit_callbacks)

    assert states(task, attempt) == ("in_review", "passed")
    runs = GateRun.objects.filter(attempt=attempt).select_related("report").order_by("gate")
    assert [(r.gate, r.state, r.tries, r.summary) for r in runs] == [
        ("diff-scope", "passed", 1, "all 2 files inside the allowed paths"),
        ("tests-pass", "passed", 1, "3 tests passed"),
    ]
    assert [(r.report.provenance, r.report.kind, r.report.name) for r in runs] == [
        ("gate", "note", "diff-scope.md"),
        ("gate", "note", "tests-pass.md"),
    ]
    event = Event.objects.get(task=task, object_key=task.key, transition="gates_passed")
    assert event.reason == "gates passed: diff-scope, tests-pass"


@pytest.mark.django_db
def test_a_failing_test_sends_the_task_back_with_the_gate_and_test_named(
    flow, reports, diffs, django_capture_on_commit_callbacks
):
    flow.gates({"tests-pass": {}, "diff-scope": {}})
    task, attempt = flow.claimed(allowed_paths=ALLOWED)
    evidence_for(flow, attempt, reports, diffs, junit="failing")

    submit(attempt, django_capture_on_commit_callbacks)

    assert states(task, attempt) == ("ready", "failed")
    run = GateRun.objects.get(attempt=attempt, gate="tests-pass")
    assert (run.state, run.report.provenance) == ("failed", "gate")
    assert attempt.end_reason == f"gates failed — tests-pass: {run.summary}"
    assert run.summary.startswith("1 of 3 tests failed: ")
    assert "test_two_agents_never_get_the_same_item" in attempt.end_reason
    assert (task.failed_attempts, task.current_attempt_id) == (1, None)


@pytest.mark.django_db
def test_the_next_attempts_context_carries_the_failed_gate(
    flow, reports, diffs, django_capture_on_commit_callbacks
):
    flow.gates({"tests-pass": {}, "diff-scope": {}})
    task, first = flow.claimed(allowed_paths=ALLOWED)
    evidence_for(flow, first, reports, diffs, junit="failing")
    submit(first, django_capture_on_commit_callbacks)

    second = attempts.task_claim(agent=flow.agent2, project=flow.project)
    bundle = task_services.task_context(task=Task.objects.get(pk=task.pk), actor=flow.agent2)

    runs = {r.gate: r for r in GateRun.objects.filter(attempt=first)}
    url = "/api/v1/evidence/{}/content/".format
    [earlier] = bundle["attempts"]
    assert (second.task_id, earlier["number"], earlier["state"]) == (task.pk, 1, "failed")
    assert earlier["ended_because"] == f"gates failed — tests-pass: {runs['tests-pass'].summary}"
    assert earlier["gates"] == [
        {
            "gate": "diff-scope",
            "state": "passed",
            "summary": "all 2 files inside the allowed paths",
            "report": url(runs["diff-scope"].report_id),
        },
        {
            "gate": "tests-pass",
            "state": "failed",
            "summary": runs["tests-pass"].summary,
            "verdict": runs["tests-pass"].verdict,
            "report": url(runs["tests-pass"].report_id),
        },
    ]
    [failed] = earlier["gates"][1]["verdict"]["failed"]
    assert failed["message"] == reports["failure_message"]


@pytest.mark.django_db
def test_with_no_gates_a_submission_goes_straight_to_review(
    flow, django_capture_on_commit_callbacks
):
    flow.gates({})
    task, attempt = flow.claimed()

    submit(attempt, django_capture_on_commit_callbacks)

    assert states(task, attempt) == ("in_review", "passed")
    assert GateRun.objects.filter(attempt=attempt).count() == 0
    event = Event.objects.get(task=task, object_key=task.key, transition="gates_passed")
    assert event.reason == "gates passed: no gates configured"


# --- Gates that crash or overrun ----------------------------------------------------------------


@pytest.mark.django_db
def test_a_gate_that_keeps_crashing_ends_in_error_with_its_traceback(
    flow, extra_gates, settings, django_capture_on_commit_callbacks
):
    settings.FACTORY_GATE_MAX_TRIES = 3
    flow.gates({"boom": {}})
    task, attempt = flow.claimed()

    submit(attempt, django_capture_on_commit_callbacks)

    run = GateRun.objects.select_related("report").get(attempt=attempt)
    assert (run.state, run.tries) == ("error", 3)
    assert run.summary == "the gate crashed on all 3 tries: RuntimeError: boom: the gate fell over"
    assert (run.report.kind, run.report.provenance, run.report.name) == (
        "log",
        "gate",
        "boom-error.log",
    )
    log = content_of(run.report)
    assert log.startswith("Traceback (most recent call last):")
    assert 'raise RuntimeError("boom: the gate fell over")' in log
    assert log.endswith("RuntimeError: boom: the gate fell over\n\n")
    assert (states(task, attempt), task.failed_attempts) == (("ready", "failed"), 1)


@pytest.mark.django_db
def test_a_crashing_gate_is_retried_until_its_tries_are_spent(
    flow, extra_gates, settings, django_capture_on_commit_callbacks
):
    settings.FACTORY_GATE_MAX_TRIES = 3
    flow.gates({"boom": {}})
    _, attempt = flow.claimed()

    submit(attempt, django_capture_on_commit_callbacks)

    run = GateRun.objects.get(attempt=attempt)
    assert transitions_of(run) == [
        "queue",
        "start",
        "requeue",
        "start",
        "requeue",
        "start",
        "crash",
    ]
    requeues = Event.objects.filter(object_id=run.pk, transition="requeue").order_by("id")
    assert [e.reason for e in requeues] == [
        f"try {n} crashed: RuntimeError: boom: the gate fell over" for n in (1, 2)
    ]


@pytest.mark.django_db
def test_a_gate_that_crashes_once_passes_on_its_second_try(
    flow, extra_gates, django_capture_on_commit_callbacks
):
    flow.gates({"flaky": {}})
    task, attempt = flow.claimed()

    submit(attempt, django_capture_on_commit_callbacks)

    run = GateRun.objects.get(attempt=attempt)
    assert (run.state, run.tries, run.summary, run.verdict) == (
        "passed",
        2,
        "fine on a second look",
        {"calls": 2},
    )
    assert transitions_of(run) == ["queue", "start", "requeue", "start", "succeed"]
    assert states(task, attempt) == ("in_review", "passed")


@pytest.mark.django_db
def test_a_gate_that_overruns_its_time_limit_ends_in_error(
    flow, extra_gates, settings, django_capture_on_commit_callbacks
):
    settings.FACTORY_GATE_TIME_LIMIT = 90
    flow.gates({"slow": {}})
    task, attempt = flow.claimed()

    submit(attempt, django_capture_on_commit_callbacks)

    run = GateRun.objects.select_related("report").get(attempt=attempt)
    assert (run.state, run.tries, run.verdict) == ("error", 1, {"error": "time limit"})
    assert run.summary == "the gate exceeded its time limit of 90 s"
    assert (run.report.kind, run.report.provenance) == ("log", "gate")
    assert transitions_of(run) == ["queue", "start", "crash"]
    assert states(task, attempt) == ("ready", "failed")


@pytest.mark.django_db
def test_a_gate_the_site_no_longer_knows_ends_in_error(
    flow, extra_gates, settings, django_capture_on_commit_callbacks
):
    settings.FACTORY_GATE_MAX_TRIES = 2
    flow.gates({"retired": {}})
    task, attempt = flow.claimed()

    submit(attempt, django_capture_on_commit_callbacks)

    run = GateRun.objects.get(attempt=attempt)
    assert (run.state, run.tries) == ("error", 2)
    assert run.summary == (
        "the gate crashed on all 2 tries: "
        "LookupError: no gate named 'retired' is registered on this site"
    )
    assert states(task, attempt) == ("ready", "failed")


@pytest.mark.django_db
def test_a_report_quoting_a_nul_byte_still_finishes_the_run(
    flow, extra_gates, django_capture_on_commit_callbacks
):
    flow.gates({"quoting": {}})
    task, attempt = flow.claimed()

    submit(attempt, django_capture_on_commit_callbacks)

    run = GateRun.objects.get(attempt=attempt)
    assert (run.counts_as_failure, run.report.provenance) == (True, "gate")
    assert states(task, attempt) == ("ready", "failed")


@pytest.mark.django_db
def test_executing_a_finished_run_changes_nothing(
    flow, reports, diffs, django_capture_on_commit_callbacks
):
    flow.gates({"tests-pass": {}})
    _, attempt = flow.claimed()
    evidence_for(flow, attempt, reports, diffs)
    submit(attempt, django_capture_on_commit_callbacks)
    run = GateRun.objects.get(attempt=attempt)
    counts = (Event.objects.count(), Evidence.objects.count())

    again = services.gate_run_execute(run=run)
    jobs.gate_run_job(run.pk)

    after = GateRun.objects.get(pk=run.pk)
    assert (after.state, after.tries, after.report_id, after.finished_at) == (
        "passed",
        1,
        run.report_id,
        run.finished_at,
    )
    assert again.state == "passed"
    assert (Event.objects.count(), Evidence.objects.count()) == counts


@pytest.mark.django_db
def test_the_gate_job_runs_a_queued_run_when_called_directly(flow, reports, diffs):
    flow.gates({"tests-pass": {}})
    task, attempt = flow.claimed()
    evidence_for(flow, attempt, reports, diffs)
    submit(attempt)  # the on-commit dispatch never happens: the message was "lost"
    run = GateRun.objects.get(attempt=attempt)

    jobs.gate_run_job(run.pk)
    jobs.gate_run_job(run.pk + 1000)  # a run that does not exist is ignored

    run.refresh_from_db()
    assert (run.state, run.tries, run.summary) == ("passed", 1, "3 tests passed")
    assert states(task, attempt) == ("in_review", "passed")


@pytest.mark.django_db
def test_a_job_delivered_again_while_its_run_is_running_leaves_it_to_its_worker(
    flow, reports, diffs
):
    flow.gates({"tests-pass": {}})
    task, attempt = flow.claimed()
    evidence_for(flow, attempt, reports, diffs)
    submit(attempt)
    run = services.gate_run_start(run=GateRun.objects.get(attempt=attempt))  # at work elsewhere
    events = Event.objects.count()

    jobs.gate_run_job(run.pk)
    jobs.gate_run_job(run.pk)

    run.refresh_from_db()
    assert (run.state, run.tries, Event.objects.count()) == ("running", 1, events)
    assert states(task, attempt) == ("checking", "checking")


@pytest.mark.django_db
def test_a_job_delivered_again_past_its_runs_time_limit_runs_it_again(
    flow, reports, diffs, settings
):
    flow.gates({"tests-pass": {}})
    task, attempt = flow.claimed()
    evidence_for(flow, attempt, reports, diffs)
    submit(attempt)
    run = services.gate_run_start(run=GateRun.objects.get(attempt=attempt))
    limit = settings.FACTORY_GATE_TIME_LIMIT + settings.FACTORY_GATE_GRACE_SECONDS
    GateRun.objects.filter(pk=run.pk).update(started_at=overdue(limit + 1))

    jobs.gate_run_job(run.pk)

    run.refresh_from_db()
    assert (run.state, run.tries, run.summary) == ("passed", 2, "3 tests passed")
    assert transitions_of(run) == ["queue", "start", "requeue", "start", "succeed"]
    assert states(task, attempt) == ("in_review", "passed")


# --- Two gates finishing at once ----------------------------------------------------------------


def finish_without_concluding(run, outcome="passed"):
    services.gate_run_start(run=run)
    services.gate_run_finish(run=run, outcome=outcome, verdict={}, summary=outcome)


@pytest.mark.django_db
def test_two_gates_finishing_at_once_move_the_task_on_once(flow):
    flow.gates({"tests-pass": {}, "diff-scope": {}})
    task, attempt = flow.claimed()
    submit(attempt)
    for run in GateRun.objects.filter(attempt=attempt):
        finish_without_concluding(run)

    attempts.attempt_checks_conclude(attempt=attempt)
    attempts.attempt_checks_conclude(attempt=attempt)

    assert states(task, attempt) == ("in_review", "passed")
    moved = Event.objects.filter(task=task, transition="gates_passed")
    assert sorted(moved.values_list("object_key", flat=True)) == [task.key, f"{task.key}#1"]


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_two_concluding_workers_at_once_move_the_task_on_once(flow, monkeypatch):
    monkeypatch.setattr(queue, "enqueue", lambda *args, **kwargs: None)  # no job is sent
    flow.gates({"tests-pass": {}, "diff-scope": {}})
    task, attempt = flow.claimed()
    submit(attempt)
    for run in GateRun.objects.filter(attempt=attempt):
        finish_without_concluding(run)
    barrier, errors = threading.Barrier(2), []

    def worker():
        try:
            barrier.wait(5)
            attempts.attempt_checks_conclude(attempt=attempt)
        except Exception as exc:  # reported below, not swallowed
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert errors == []
    assert states(task, attempt) == ("in_review", "passed")
    assert Event.objects.filter(task=task, transition="gates_passed").count() == 2


# --- The reconciler -----------------------------------------------------------------------------


def overdue(seconds):
    return timezone.now() - timedelta(seconds=seconds)


@pytest.mark.django_db
def test_reconcile_expires_an_overdue_lease(flow):
    task, attempt = flow.claimed()
    expire_lease(attempt)

    counts = reconciler.reconcile()

    assert counts == {**ZERO, "leases_expired": 1}
    assert states(task, attempt) == ("ready", "abandoned")


@pytest.mark.django_db
def test_reconcile_requeues_a_run_whose_worker_died_and_the_job_finishes_it(
    flow, reports, diffs, settings
):
    flow.gates({"tests-pass": {}})
    task, attempt = flow.claimed()
    evidence_for(flow, attempt, reports, diffs)
    submit(attempt)
    run = services.gate_run_start(run=GateRun.objects.get(attempt=attempt))
    GateRun.objects.filter(pk=run.pk).update(
        started_at=overdue(settings.FACTORY_GATE_TIME_LIMIT + 61)
    )

    counts = reconciler.reconcile()

    assert counts == {**ZERO, "gate_runs_requeued": 1}
    run.refresh_from_db()
    assert (run.state, run.tries, run.summary) == ("passed", 2, "3 tests passed")
    assert transitions_of(run) == ["queue", "start", "requeue", "start", "succeed"]
    assert states(task, attempt) == ("in_review", "passed")


@pytest.mark.django_db
def test_a_run_whose_workers_died_on_every_try_ends_in_error(flow, settings):
    settings.FACTORY_GATE_MAX_TRIES = 1
    flow.gates({"tests-pass": {}})
    task, attempt = flow.claimed()
    submit(attempt)
    run = services.gate_run_start(run=GateRun.objects.get(attempt=attempt))
    GateRun.objects.filter(pk=run.pk).update(
        started_at=overdue(settings.FACTORY_GATE_TIME_LIMIT + 61)
    )

    counts = reconciler.reconcile()

    run.refresh_from_db()
    assert counts == {**ZERO, "gate_runs_requeued": 1}
    assert (run.state, run.tries) == ("error", 2)
    assert run.summary == "no result after 1 tries (worker lost or time limit)"
    assert (run.report.kind, content_of(run.report)) == ("log", f"{run.summary}\n")
    assert states(task, attempt) == ("ready", "failed")


@pytest.mark.django_db
def test_reconcile_leaves_a_run_that_is_still_within_its_time(flow, settings):
    flow.gates({"tests-pass": {}})
    task, attempt = flow.claimed()
    submit(attempt)
    run = services.gate_run_start(run=GateRun.objects.get(attempt=attempt))
    GateRun.objects.filter(pk=run.pk).update(
        started_at=overdue(settings.FACTORY_GATE_TIME_LIMIT + 50)
    )
    events_before = Event.objects.count()

    counts = reconciler.reconcile()

    assert counts == ZERO
    run.refresh_from_db()
    assert (run.state, run.tries, Event.objects.count()) == ("running", 1, events_before)
    assert states(task, attempt) == ("checking", "checking")


@pytest.mark.django_db
def test_reconcile_redispatches_queued_runs_whose_job_never_started(flow, reports, diffs, settings):
    flow.gates({"tests-pass": {}, "diff-scope": {}, "coverage": {"threshold": 0.5}})
    task, attempt = flow.claimed(allowed_paths=ALLOWED)
    evidence_for(flow, attempt, reports, diffs)
    submit(attempt)  # dispatched_at stays NULL: the on-commit dispatch never ran
    runs = GateRun.objects.filter(attempt=attempt)
    runs.filter(gate="diff-scope").update(
        dispatched_at=overdue(settings.FACTORY_GATE_REQUEUE_AFTER + 1)
    )
    just_now = timezone.now()
    runs.filter(gate="coverage").update(dispatched_at=just_now)

    counts = reconciler.reconcile()

    assert counts == {**ZERO, "gate_runs_redispatched": 2}
    assert [(r.gate, r.state, r.tries) for r in runs.order_by("gate")] == [
        ("coverage", "queued", 0),
        ("diff-scope", "passed", 1),
        ("tests-pass", "passed", 1),
    ]
    assert runs.get(gate="coverage").dispatched_at == just_now
    assert states(task, attempt) == ("checking", "checking")


@pytest.mark.django_db
def test_reconcile_concludes_an_attempt_whose_runs_have_all_finished(flow):
    flow.gates({"tests-pass": {}, "diff-scope": {}})
    task, attempt = flow.claimed()
    submit(attempt)
    for run in GateRun.objects.filter(attempt=attempt):
        finish_without_concluding(run, outcome="failed" if run.gate == "diff-scope" else "passed")

    counts = reconciler.reconcile()

    assert counts == {**ZERO, "attempts_concluded": 1}
    assert states(task, attempt) == ("ready", "failed")
    assert attempt.end_reason == "gates failed — diff-scope: failed"


@pytest.mark.django_db
def test_housekeeping_deletes_expired_tokens_only(flow):
    AuthToken.objects.create(user=flow.agent, expiry=timedelta(seconds=-1))
    live, _ = AuthToken.objects.create(user=flow.agent, expiry=timedelta(hours=1))
    forever, _ = AuthToken.objects.create(user=flow.reviewer, expiry=None)

    counts = reconciler.housekeeping()

    assert counts == {"tokens_deleted": 1, "workspaces_swept": 0}
    assert sorted(AuthToken.objects.values_list("pk", flat=True)) == sorted([live.pk, forever.pk])


@pytest.mark.django_db
def test_reconcile_counts_everything_it_did_and_then_has_nothing_left(
    flow, reports, diffs, settings
):
    flow.gates({"tests-pass": {}})
    stuck_task, stuck = flow.claimed()
    evidence_for(flow, stuck, reports, diffs)
    submit(stuck)
    run = services.gate_run_start(run=GateRun.objects.get(attempt=stuck))
    GateRun.objects.filter(pk=run.pk).update(
        started_at=overdue(settings.FACTORY_GATE_TIME_LIMIT + 61)
    )
    lost_task, lost = flow.claimed()
    evidence_for(flow, lost, reports, diffs)
    submit(lost)
    done_task, done = flow.claimed()
    submit(done)
    finish_without_concluding(GateRun.objects.get(attempt=done))
    idle_task, idle = flow.claimed()
    expire_lease(idle)
    AuthToken.objects.create(user=flow.agent, expiry=timedelta(seconds=-1))

    first, second = reconciler.reconcile(), reconciler.reconcile()

    assert first == {
        "leases_expired": 1,
        "gate_runs_requeued": 1,
        "gate_runs_redispatched": 1,
        "attempts_concluded": 1,
        "landers_woken": 0,
    }
    assert second == ZERO
    assert AuthToken.objects.count() == 1  # expired tokens are the housekeeping's
    tasks = Task.objects.filter(pk__in=[stuck_task.pk, lost_task.pk, done_task.pk, idle_task.pk])
    assert list(tasks.order_by("number").values_list("state", flat=True)) == [
        "in_review",
        "in_review",
        "in_review",
        "ready",
    ]


@pytest.mark.django_db
def test_the_reconcile_job_returns_the_counts(flow):
    _, attempt = flow.claimed()
    expire_lease(attempt)

    assert task_jobs.reconcile_job() == {**ZERO, "leases_expired": 1}
    assert task_jobs.reconcile_job() == ZERO


@pytest.mark.django_db
def test_the_reconcile_command_runs_the_reconciler_and_the_housekeeping_and_prints_json(
    flow, settings
):
    _, attempt = flow.claimed()
    expire_lease(attempt)
    AuthToken.objects.create(user=flow.agent, expiry=timedelta(seconds=-1))
    out = io.StringIO()

    call_command("reconcile", stdout=out)

    counts = {**ZERO, "leases_expired": 1, "tokens_deleted": 1, "workspaces_swept": 0}
    assert out.getvalue() == json.dumps(counts, sort_keys=True) + "\n"
    jobs = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert {"tasks.jobs.reconcile_job", "tasks.jobs.housekeeping_job"} <= jobs  # beat: each alone
