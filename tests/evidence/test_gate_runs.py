"""Gate runs: queued once per gate, run, finished with their report as evidence, concluded once."""

from pathlib import Path

import pytest
from django.conf import settings
from django.db import IntegrityError, transaction

from evidence import services
from evidence.models import Evidence, GateRun
from projects.errors import Conflict, PermissionDenied
from projects.fsm import fire
from projects.models import Event
from tasks import attempts

POLICY_GATES = ["diff-scope", "required-evidence", "spec-current", "tests-pass"]


def blob_files() -> list[str]:
    root = Path(settings.MEDIA_ROOT)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def queued(flow, **kwargs):
    task, attempt = flow.checking(**kwargs)
    runs = services.gate_runs_create(attempt=attempt, policy=flow.project.gate_policy)
    return task, attempt, runs


def finish(run, outcome="passed", summary="ok", report=None):
    services.gate_run_start(run=run)
    return services.gate_run_finish(
        run=run, outcome=outcome, verdict={"outcome": outcome}, summary=summary, report=report
    )


def transitions_of(task, since_id=0):
    return list(
        Event.objects.filter(task=task, id__gt=since_id)
        .order_by("id")
        .values_list("object_key", "transition")
    )


@pytest.mark.django_db
def test_submit_queues_one_run_per_policy_gate_in_the_same_transaction(flow):
    task, attempt = flow.claimed()
    events_before = Event.objects.count()

    attempts.attempt_submit(attempt=attempt, actor=flow.agent, summary="s", change={})

    runs = list(GateRun.objects.filter(attempt=attempt).order_by("gate"))
    assert [(r.gate, r.state, r.params, r.tries) for r in runs] == [
        (gate, "queued", {}, 0) for gate in POLICY_GATES
    ]
    events = Event.objects.order_by("id")[events_before:]
    assert [(e.object_key, e.transition, e.from_state, e.to_state) for e in events][2:] == [
        (f"{task.key}#1 {gate}", "queue", "", "queued") for gate in POLICY_GATES
    ]
    assert {(e.actor, e.task_id) for e in events[2:]} == {(None, task.pk)}


@pytest.mark.django_db
def test_gate_runs_create_keeps_the_policy_parameters(flow):
    _, attempt = flow.checking()

    runs = services.gate_runs_create(
        attempt=attempt, policy={"coverage": {"threshold": 0.8}, "tests-pass": None}
    )

    assert [(r.gate, r.params) for r in runs] == [
        ("coverage", {"threshold": 0.8}),
        ("tests-pass", {}),
    ]


@pytest.mark.django_db
def test_gate_runs_create_is_idempotent(flow):
    _, attempt, first = queued(flow)
    events_before = Event.objects.count()

    again = services.gate_runs_create(attempt=attempt, policy=flow.project.gate_policy)

    assert [r.pk for r in again] == [r.pk for r in first]
    assert GateRun.objects.count() == 4
    assert Event.objects.count() == events_before


@pytest.mark.django_db
def test_one_run_per_attempt_and_gate_is_a_database_constraint(flow):
    _, attempt, _ = queued(flow)

    with pytest.raises(IntegrityError), transaction.atomic():
        GateRun.objects.create(attempt=attempt, gate="tests-pass")

    assert GateRun.objects.filter(attempt=attempt, gate="tests-pass").count() == 1


@pytest.mark.django_db
def test_the_same_gate_runs_again_for_the_next_attempt(flow):
    task, first, runs = queued(flow)
    for run in runs:
        finish(run, outcome="failed", summary="1 failed")
    attempts.attempt_checks_conclude(attempt=first)
    second = attempts.task_claim(agent=flow.agent2)

    again = services.gate_runs_create(attempt=second, policy={"tests-pass": {}})

    assert (second.task_id, second.number) == (task.pk, 2)
    assert [(r.attempt_id, r.gate, r.state) for r in again] == [(second.pk, "tests-pass", "queued")]
    assert GateRun.objects.filter(gate="tests-pass").count() == 2


@pytest.mark.django_db
def test_gate_run_start_counts_the_try(flow):
    _, _, runs = queued(flow)
    events_before = Event.objects.count()

    run = services.gate_run_start(run=runs[0])

    assert (run.state, run.tries) == ("running", 1)
    assert run.started_at is not None
    event = Event.objects.latest("id")
    assert (event.transition, event.from_state, event.to_state, event.extra) == (
        "start",
        "queued",
        "running",
        {"try": 1},
    )
    assert Event.objects.count() == events_before + 1


@pytest.mark.django_db
def test_a_requeued_run_starts_again_with_its_next_try(flow):
    _, _, runs = queued(flow)
    services.gate_run_start(run=runs[0])

    services.gate_run_requeue(run=runs[0], reason="worker lost")
    run = services.gate_run_start(run=runs[0])

    assert (run.state, run.tries) == ("running", 2)
    requeue = Event.objects.get(transition="requeue")
    assert (requeue.from_state, requeue.to_state, requeue.reason) == (
        "running",
        "queued",
        "worker lost",
    )


@pytest.mark.django_db
def test_a_running_run_cannot_be_started_again(flow):
    _, _, runs = queued(flow)
    services.gate_run_start(run=runs[0])
    events_before = Event.objects.count()

    with pytest.raises(Conflict) as refused:
        services.gate_run_start(run=runs[0])

    assert refused.value.code == "invalid_state"
    assert GateRun.objects.get(pk=runs[0].pk).tries == 1
    assert Event.objects.count() == events_before


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["start", "requeue", "succeed"])
def test_gate_transitions_are_for_the_system_only(flow, name):
    _, _, runs = queued(flow)
    run = services.gate_run_start(run=runs[0]) if name != "start" else runs[0]
    kwargs = {"verdict": {}, "summary": "ok"} if name == "succeed" else {}
    events_before = Event.objects.count()

    with pytest.raises(PermissionDenied) as refused:
        fire(GateRun.objects.get(pk=run.pk), name, actor=flow.manager, **kwargs)

    assert refused.value.code == "system_only"
    assert GateRun.objects.get(pk=run.pk).state == run.state
    assert Event.objects.count() == events_before


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("outcome", "transition"), [("passed", "succeed"), ("failed", "fail"), ("error", "crash")]
)
def test_gate_run_finish_records_the_outcome_and_verdict(flow, outcome, transition):
    _, _, runs = queued(flow)

    run = finish(runs[0], outcome=outcome, summary="1 file outside the allowed paths")

    assert (run.state, run.verdict, run.summary) == (
        outcome,
        {"outcome": outcome},
        "1 file outside the allowed paths",
    )
    assert run.finished_at is not None
    event = Event.objects.latest("id")
    assert (event.transition, event.from_state, event.to_state, event.actor) == (
        transition,
        "running",
        outcome,
        None,
    )
    assert event.reason == "1 file outside the allowed paths"


@pytest.mark.django_db
def test_the_gate_report_becomes_gate_evidence_that_is_not_authoritative(flow):
    _, attempt, runs = queued(flow)
    report = (b"tests-pass: 3 passed\n", "log", "tests-pass.txt", "text/plain")

    run = finish(runs[0], summary="3 passed", report=report)

    evidence = Evidence.objects.get()
    assert run.report == evidence
    assert (evidence.attempt, evidence.kind, evidence.name, evidence.media_type) == (
        attempt,
        "log",
        "tests-pass.txt",
        "text/plain",
    )
    assert (evidence.provenance, evidence.authoritative, evidence.uploaded_by) == (
        "gate",
        False,
        None,
    )
    assert (evidence.size, evidence.summary) == (21, {"lines": 1})


@pytest.mark.django_db
def test_finishing_a_finished_run_changes_nothing(flow):
    _, _, runs = queued(flow)
    first = finish(runs[0], outcome="failed", summary="1 failed", report=(b"x\n", "log", "r", "t"))
    events_before = Event.objects.count()

    again = services.gate_run_finish(
        run=runs[0],
        outcome="passed",
        verdict={},
        summary="all passed",
        report=(b"other\n", "log", "r", "t"),
    )

    assert (again.state, again.summary, again.report_id) == ("failed", "1 failed", first.report_id)
    assert again.finished_at == first.finished_at
    assert (Event.objects.count(), Evidence.objects.count()) == (events_before, 1)
    assert len(blob_files()) == 1


@pytest.mark.django_db
def test_finishing_a_run_that_is_not_running_stores_nothing(flow):
    _, _, runs = queued(flow)
    events_before = Event.objects.count()

    with pytest.raises(Conflict) as refused:
        services.gate_run_finish(
            run=runs[0],
            outcome="passed",
            verdict={},
            summary="ok",
            report=(b"x\n", "log", "r", "t"),
        )

    assert refused.value.code == "invalid_state"
    assert GateRun.objects.get(pk=runs[0].pk).state == "queued"
    assert (Event.objects.count(), Evidence.objects.count()) == (events_before, 0)
    assert blob_files() == []


# --- Concluding -------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("unfinished", ["queued", "running"])
def test_conclude_waits_while_a_run_is_unfinished(flow, unfinished):
    task, attempt, runs = queued(flow)
    for run in runs[:-1]:
        finish(run)
    if unfinished == "running":
        services.gate_run_start(run=runs[-1])
    events_before = Event.objects.count()

    attempts.attempt_checks_conclude(attempt=attempt)

    task.refresh_from_db()
    attempt.refresh_from_db()
    assert (task.state, attempt.state) == ("checking", "checking")
    assert Event.objects.count() == events_before


@pytest.mark.django_db
def test_all_gates_passed_puts_the_task_in_review(flow):
    task, attempt, runs = queued(flow)
    for run in runs:
        finish(run)
    last_event = Event.objects.latest("id").pk

    attempts.attempt_checks_conclude(attempt=attempt)

    task.refresh_from_db()
    attempt.refresh_from_db()
    assert (task.state, attempt.state, task.current_attempt_id) == (
        "in_review",
        "passed",
        attempt.pk,
    )
    assert transitions_of(task, last_event) == [
        (f"{task.key}#1", "gates_passed"),
        (task.key, "gates_passed"),
    ]
    assert Event.objects.latest("id").reason == f"gates passed: {', '.join(POLICY_GATES)}"


@pytest.mark.django_db
@pytest.mark.parametrize("outcome", ["failed", "error"])
def test_a_failed_gate_returns_the_task_to_ready_with_the_reason(flow, outcome):
    task, attempt, runs = queued(flow)
    for run in runs:
        if run.gate == "tests-pass":
            finish(run, outcome=outcome, summary="1 of 3 tests failed: test_tiny::test_adds")
        else:
            finish(run)

    attempts.attempt_checks_conclude(attempt=attempt)

    task.refresh_from_db()
    attempt.refresh_from_db()
    assert (task.state, task.failed_attempts, task.current_attempt_id) == ("ready", 1, None)
    assert attempt.state == "failed"
    assert (
        attempt.end_reason == "gates failed — tests-pass: 1 of 3 tests failed: test_tiny::test_adds"
    )
    assert Event.objects.filter(task=task, transition="gates_failed").count() == 2


@pytest.mark.django_db
def test_every_failing_gate_is_named_in_the_reason(flow):
    _, attempt, runs = queued(flow)
    summaries = {"diff-scope": "1 file outside", "tests-pass": "2 failed"}
    for run in runs:
        finish(
            run,
            outcome="failed" if run.gate in summaries else "passed",
            summary=summaries.get(run.gate, "ok"),
        )

    attempts.attempt_checks_conclude(attempt=attempt)

    attempt.refresh_from_db()
    assert attempt.end_reason == "gates failed — diff-scope: 1 file outside; tests-pass: 2 failed"


@pytest.mark.django_db
def test_a_failed_gate_on_the_last_attempt_fails_the_task(flow):
    task, attempt, runs = queued(flow, max_attempts=1)
    for run in runs:
        finish(run, outcome="failed", summary="no")

    attempts.attempt_checks_conclude(attempt=attempt)

    task.refresh_from_db()
    assert (task.state, task.failed_attempts) == ("failed", 1)


@pytest.mark.django_db
@pytest.mark.parametrize("outcome", ["passed", "failed"])
def test_concluding_twice_moves_the_task_once(flow, outcome):
    task, attempt, runs = queued(flow)
    for run in runs:
        finish(run, outcome=outcome, summary="x")
    events_before = Event.objects.count()

    attempts.attempt_checks_conclude(attempt=attempt)
    again = attempts.attempt_checks_conclude(attempt=attempt)

    task.refresh_from_db()
    assert (task.state, again.state) == (
        ("in_review", "passed") if outcome == "passed" else ("ready", "failed")
    )
    assert Event.objects.count() == events_before + 2  # one for the attempt, one for the task
    assert Event.objects.filter(task=task, transition__startswith="gates_").count() == 2


@pytest.mark.django_db
def test_conclude_leaves_a_running_attempt_alone(flow):
    task, attempt = flow.claimed()
    events_before = Event.objects.count()

    attempts.attempt_checks_conclude(attempt=attempt)

    task.refresh_from_db()
    assert (task.state, Event.objects.count()) == ("claimed", events_before)


@pytest.mark.django_db
def test_conclude_before_the_runs_exist_does_not_pass_the_attempt(flow):
    task, attempt = flow.checking()
    events_before = Event.objects.count()

    attempts.attempt_checks_conclude(attempt=attempt)

    task.refresh_from_db()
    assert task.state == "checking"
    assert Event.objects.count() == events_before


@pytest.mark.django_db
def test_conclude_with_an_empty_gate_policy_passes_the_attempt(flow):
    flow.project.gate_policy = {}
    flow.project.save(update_fields=["gate_policy"])
    task, attempt = flow.checking()
    services.gate_runs_create(attempt=attempt, policy=flow.project.gate_policy)

    attempts.attempt_checks_conclude(attempt=attempt)

    task.refresh_from_db()
    assert task.state == "in_review"
    assert Event.objects.latest("id").reason == "gates passed: no gates configured"
