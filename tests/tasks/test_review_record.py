"""The record of what applied: a verdict keeps what it was judged against, whatever
changes after it."""

from decisions import services as decisions
from tasks import attempts
from tasks.review import task_approve, task_reject
from tests.factories import all_met

PASSING = (
    b"<testsuite tests='1'><testcase classname='tests.test_claim' name='test_claim'/></testsuite>"
)


def decided(flow, spec, **kwargs):
    decision = decisions.decision_propose(
        project=flow.project,
        actor=flow.reviewer,
        title="Claims skip blocked tasks",
        context="c",
        decision="d",
        specs=[spec],
        **kwargs,
    )
    return decisions.decision_accept(decision=decision, actor=flow.manager)


def test_an_approval_keeps_the_spec_version_decisions_gates_and_commit(
    flow, django_capture_on_commit_callbacks
):
    spec = flow.spec()
    decision = decided(flow, spec)
    flow.gates({"tests-pass": {}})
    task, attempt = flow.claimed(spec=spec)
    flow.attach(attempt, PASSING, kind="junit", name="junit.xml")
    with django_capture_on_commit_callbacks(execute=True):
        attempts.attempt_submit(
            attempt=attempt,
            actor=flow.agent,
            summary="s",
            change={"commit": "4be1c0d000000000000000000000000000000000"},
        )
    task.refresh_from_db()

    task_approve(task=task, actor=flow.reviewer, criteria=all_met(attempt))

    attempt.refresh_from_db()
    applied = attempt.applied
    assert applied["spec"] == {"key": spec.key, "version": 1, "current_version": 1}
    assert applied["decisions"] == [{"key": decision.key, "title": "Claims skip blocked tasks"}]
    assert applied["gate_policy"] == {"tests-pass": {}}
    assert applied["gates"] == [
        {"gate": "tests-pass", "state": "passed", "summary": "1 tests passed"}
    ]
    assert (applied["commit"], applied["runner"]) == (
        "4be1c0d000000000000000000000000000000000",
        None,
    )


def test_the_record_is_unchanged_when_the_spec_moves_on_and_the_decision_is_superseded(
    flow, client, api
):
    flow.gates({})
    spec = flow.spec()
    old = decided(flow, spec)
    task, attempt = flow.in_review(spec=spec)
    task_approve(task=task, actor=flow.reviewer, criteria=all_met(attempt))
    attempt.refresh_from_db()
    before, verdicts = attempt.applied, attempt.criteria_verdicts

    version = decisions.spec_version_create(spec=spec, actor=flow.manager, body="v2", criteria=[])
    decisions.spec_version_accept(version=version, actor=flow.manager)
    decided(flow, spec, supersedes=[old])

    attempt.refresh_from_db()
    assert attempt.applied == before
    assert attempt.criteria_verdicts == verdicts
    assert [c["key"] for c in verdicts] == ["AC-1", "AC-2", "AC-3"]  # v2 has no criteria
    review = api(flow.manager).get(f"/api/v1/attempts/{attempt.pk}/").json()["review"]
    assert review["applied"] == before
    assert (
        review["applied_text"]
        == f"{spec.key} v1, decisions {old.key}, no gates, commit abc123000000"
    )
    client.force_login(flow.manager)
    page = client.get(f"/tasks/{task.key}/").content.decode()
    in_force = page[page.index('id="in-force"') :]
    assert f"{spec.key} v1</a> (current then)" in in_force
    assert f"{old.key}</a>" in in_force


def test_a_rejection_keeps_its_record_too(flow):
    task, attempt = flow.in_review()

    task_reject(task=task, actor=flow.reviewer, reason="no")

    attempt.refresh_from_db()
    assert (attempt.applied["spec"], attempt.applied["decisions"], attempt.applied["commit"]) == (
        None,
        [],
        "abc1230000000000000000000000000000000000",
    )
