"""Every transition of the task and attempt machines: right state and role, or refused with nothing changed."""

import pytest
from django.core.exceptions import ValidationError
from django.db import transaction

from projects.errors import Conflict, PermissionDenied
from projects.fsm import fire
from projects.models import Event
from projects.roles import Role
from tasks import attempts, review, services
from tasks.models import Attempt, Task
from tests.factories import expire_lease, member

ALL_STATES = [
    "draft",
    "ready",
    "claimed",
    "checking",
    "in_review",
    "done",
    "blocked",
    "failed",
    "cancelled",
]

MANAGER_TRANSITIONS = {
    "publish": (services.task_publish, {"draft"}, "ready"),
    "unblock": (services.task_unblock, {"blocked"}, "ready"),
    "reopen": (services.task_reopen, {"failed"}, "ready"),
    "cancel": (services.task_cancel, {"draft", "ready", "blocked", "failed"}, "cancelled"),
}


def task_in(flow, state) -> Task:
    built = getattr(flow, state)() if state != "draft" else flow.draft()
    task = built[0] if isinstance(built, tuple) else built
    task.refresh_from_db()
    assert task.state == state
    return task


def assert_unchanged(task, state, events_before):
    task.refresh_from_db()
    assert task.state == state
    assert Event.objects.count() == events_before


@pytest.mark.django_db
@pytest.mark.parametrize("state", ALL_STATES)
@pytest.mark.parametrize("name", MANAGER_TRANSITIONS)
def test_manager_transition_from_each_state(flow, name, state):
    service, sources, target = MANAGER_TRANSITIONS[name]
    task = task_in(flow, state)
    events_before = Event.objects.count()

    if state in sources:
        result = service(task=task, actor=flow.manager, reason="because")
        assert result.state == target
        event = Event.objects.latest("id")
        assert (event.transition, event.from_state, event.to_state) == (name, state, target)
        assert (event.actor, event.reason, event.task_id) == (flow.manager, "because", task.pk)
        assert Event.objects.count() == events_before + 1
    else:
        with pytest.raises(Conflict) as refused:
            service(task=task, actor=flow.manager)
        assert refused.value.code == "invalid_state"
        assert_unchanged(task, state, events_before)


@pytest.mark.django_db
@pytest.mark.parametrize("role", [Role.AGENT, Role.REVIEWER, Role.VERIFIER, None])
@pytest.mark.parametrize("name", MANAGER_TRANSITIONS)
def test_manager_transitions_refuse_everyone_else(flow, other_flow, name, role):
    service, sources, _ = MANAGER_TRANSITIONS[name]
    task = task_in(flow, sorted(sources)[0])
    # None: a manager of another project.
    actor = member(flow.project, role) if role else other_flow.manager
    events_before = Event.objects.count()

    with pytest.raises(PermissionDenied) as refused:
        service(task=task, actor=actor)

    assert refused.value.code == "permission_denied"
    assert_unchanged(task, sorted(sources)[0], events_before)


@pytest.mark.django_db
def test_release_returns_the_task_to_ready_and_ends_the_attempt(flow):
    task, attempt = flow.claimed()

    attempts.attempt_release(attempt=attempt, actor=flow.agent, reason="wrong skills")

    task.refresh_from_db()
    attempt.refresh_from_db()
    assert (task.state, task.current_attempt_id) == ("ready", None)
    assert (attempt.state, attempt.end_reason) == ("released", "wrong skills")
    assert list(Event.objects.filter(task=task).values_list("transition", flat=True))[-2:] == [
        "release",
        "release",
    ]


@pytest.mark.django_db
def test_block_needs_a_reason_and_changes_nothing_without_one(flow):
    task, attempt = flow.claimed()
    events_before = Event.objects.count()

    with pytest.raises(ValidationError) as refused:
        attempts.attempt_release(attempt=attempt, actor=flow.agent, blocked=True, reason=" ")

    assert "reason" in refused.value.message_dict
    assert_unchanged(task, "claimed", events_before)


@pytest.mark.django_db
def test_block_records_the_reason_on_the_task_timeline(flow):
    task, attempt = flow.claimed()

    attempts.attempt_release(attempt=attempt, actor=flow.agent, blocked=True, reason="needs S3")

    task.refresh_from_db()
    attempt.refresh_from_db()
    assert (task.state, attempt.state) == ("blocked", "blocked")
    assert (
        Event.objects.filter(task=task, transition="block", object_key=task.key).get().reason
        == "needs S3"
    )


@pytest.mark.django_db
@pytest.mark.parametrize("action", ["submit", "release", "block"])
def test_only_the_lease_holder_may_end_a_running_attempt(flow, action):
    task, attempt = flow.claimed()
    events_before = Event.objects.count()

    with pytest.raises(PermissionDenied) as refused:
        holder_action(action, attempt, flow.agent2)

    assert refused.value.code == "not_lease_holder"
    assert_unchanged(task, "claimed", events_before)


def holder_action(action, attempt, actor):
    if action == "submit":
        return attempts.attempt_submit(attempt=attempt, actor=actor, summary="s", change={})
    return attempts.attempt_release(
        attempt=attempt, actor=actor, reason="r", blocked=action == "block"
    )


@pytest.mark.django_db
@pytest.mark.parametrize("action", ["submit", "release", "block"])
def test_expired_lease_cannot_end_the_attempt(flow, action):
    task, attempt = flow.claimed(lease_seconds=60)
    expire_lease(attempt)
    events_before = Event.objects.count()

    with pytest.raises(Conflict) as refused:
        holder_action(action, attempt, flow.agent)

    assert refused.value.code == "lease_lost"
    assert_unchanged(task, "claimed", events_before)


@pytest.mark.django_db
@pytest.mark.parametrize("state", ["ready", "checking", "in_review", "done", "blocked"])
def test_submit_is_refused_once_the_attempt_is_over(flow, state):
    task, attempt = flow.claimed()
    if state == "ready":
        attempts.attempt_release(attempt=attempt, actor=flow.agent)
    elif state == "blocked":
        attempts.attempt_release(attempt=attempt, actor=flow.agent, blocked=True, reason="r")
    else:
        attempts.attempt_submit(attempt=attempt, actor=flow.agent, summary="s", change={})
        if state in ("in_review", "done"):
            attempts.attempt_gates_passed(attempt=attempt)
        if state == "done":
            review.task_approve(task=task, actor=flow.reviewer)
    events_before = Event.objects.count()

    with pytest.raises(Conflict) as refused:
        attempts.attempt_submit(attempt=attempt, actor=flow.agent, summary="again", change={})

    assert refused.value.code == "invalid_state"
    assert_unchanged(task, state, events_before)


@pytest.mark.django_db
def test_submit_moves_task_and_attempt_to_checking(flow):
    task, attempt = flow.claimed()

    attempts.attempt_submit(
        attempt=attempt,
        actor=flow.agent,
        summary="Done.",
        change={"commit": "abc"},
        idempotency_key="k1",
    )

    task.refresh_from_db()
    attempt.refresh_from_db()
    assert (task.state, attempt.state) == ("checking", "checking")
    assert (attempt.summary, attempt.change, attempt.idempotency_key) == (
        "Done.",
        {"commit": "abc"},
        "k1",
    )
    assert attempt.submitted_at is not None


@pytest.mark.django_db
def test_repeated_submit_with_the_same_key_changes_nothing(flow):
    _, attempt = flow.claimed()
    first = attempts.attempt_submit(
        attempt=attempt, actor=flow.agent, summary="a", change={}, idempotency_key="k1"
    )
    events_before = Event.objects.count()

    again = attempts.attempt_submit(
        attempt=attempt, actor=flow.agent, summary="a", change={}, idempotency_key="k1"
    )

    assert again.pk == first.pk
    assert (again.state, again.submit_receipt) == ("checking", first.submit_receipt)
    assert Event.objects.count() == events_before


@pytest.mark.django_db
def test_a_reused_idempotency_key_with_another_body_is_refused(flow):
    _, attempt = flow.claimed()
    attempts.attempt_submit(
        attempt=attempt, actor=flow.agent, summary="a", change={}, idempotency_key="k1"
    )
    events_before = Event.objects.count()

    with pytest.raises(Conflict) as refused:
        attempts.attempt_submit(
            attempt=attempt, actor=flow.agent, summary="b", change={}, idempotency_key="k1"
        )

    assert refused.value.code == "idempotency_key_reused"
    assert Attempt.objects.get(pk=attempt.pk).summary == "a"
    assert Event.objects.count() == events_before


@pytest.mark.django_db
def test_gates_passed_puts_the_task_in_review(flow):
    task, attempt = flow.checking()

    attempts.attempt_gates_passed(attempt=attempt, reason="all gates passed")

    task.refresh_from_db()
    attempt.refresh_from_db()
    assert (task.state, attempt.state, task.current_attempt_id) == (
        "in_review",
        "passed",
        attempt.pk,
    )


@pytest.mark.django_db
def test_gates_failed_returns_the_task_to_ready_with_the_reason(flow):
    task, attempt = flow.checking()

    attempts.attempt_gates_failed(attempt=attempt, reason="tests-pass: 2 failed")

    task.refresh_from_db()
    attempt.refresh_from_db()
    assert (task.state, task.failed_attempts, task.current_attempt_id) == ("ready", 1, None)
    assert (attempt.state, attempt.end_reason) == ("failed", "tests-pass: 2 failed")


@pytest.mark.django_db
def test_gates_failed_on_the_last_attempt_fails_the_task(flow):
    task, attempt = flow.checking(max_attempts=1)

    attempts.attempt_gates_failed(attempt=attempt, reason="diff-scope: outside")

    task.refresh_from_db()
    assert (task.state, task.failed_attempts) == ("failed", 1)


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["gates_passed", "gates_failed", "expire"])
def test_system_transitions_refuse_people(flow, name):
    task, attempt = flow.checking() if name != "expire" else flow.claimed()
    kwargs = {"end_reason": "x"} if name == "gates_failed" else {}
    events_before = Event.objects.count()

    with pytest.raises(PermissionDenied) as refused:
        fire(Attempt.objects.get(pk=attempt.pk), name, actor=flow.manager, **kwargs)

    assert refused.value.code == "system_only"
    assert_unchanged(task, task.state, events_before)


@pytest.mark.django_db
@pytest.mark.parametrize("service", [attempts.attempt_gates_passed, attempts.attempt_gates_failed])
@pytest.mark.parametrize("state", ["claimed", "in_review", "done"])
def test_gate_outcomes_need_a_checking_attempt(flow, service, state):
    task, attempt = getattr(flow, state)()
    task.refresh_from_db()
    events_before = Event.objects.count()
    kwargs = {"reason": "x"} if service is attempts.attempt_gates_failed else {}

    with pytest.raises(Conflict):
        service(attempt=attempt, **kwargs)

    assert_unchanged(task, state, events_before)


@pytest.mark.django_db
def test_approve_marks_task_done_and_attempt_approved(flow):
    task, attempt = flow.in_review()

    review.task_approve(task=task, actor=flow.reviewer, reason="criteria met")

    task.refresh_from_db()
    attempt.refresh_from_db()
    assert (task.state, task.current_attempt_id) == ("done", attempt.pk)
    assert (attempt.state, attempt.reviewed_by, attempt.end_reason) == (
        "approved",
        flow.reviewer,
        "criteria met",
    )


@pytest.mark.django_db
def test_reject_returns_task_to_ready_with_the_reason_on_the_attempt(flow):
    task, attempt = flow.in_review()

    review.task_reject(task=task, actor=flow.reviewer, reason="AC-2 unproven")

    task.refresh_from_db()
    attempt.refresh_from_db()
    assert (task.state, task.failed_attempts) == ("ready", 1)
    assert (attempt.state, attempt.end_reason) == ("rejected", "AC-2 unproven")


@pytest.mark.django_db
def test_reject_on_the_last_attempt_fails_the_task(flow):
    task, _ = flow.in_review(max_attempts=1)

    review.task_reject(task=task, actor=flow.reviewer, reason="wrong approach")

    task.refresh_from_db()
    assert task.state == "failed"


@pytest.mark.django_db
def test_reject_needs_a_reason(flow):
    task, _ = flow.in_review()
    events_before = Event.objects.count()

    with pytest.raises(ValidationError) as refused:
        review.task_reject(task=task, actor=flow.reviewer, reason="  ")

    assert "reason" in refused.value.message_dict
    assert_unchanged(task, "in_review", events_before)


@pytest.mark.django_db
@pytest.mark.parametrize("verdict", [review.task_approve, review.task_reject])
def test_the_submitter_can_never_review_their_own_attempt(flow, verdict):
    task, _ = flow.in_review()
    submitter = member(flow.project, Role.REVIEWER, flow.agent.username)  # a reviewer too
    events_before = Event.objects.count()

    with pytest.raises(PermissionDenied) as refused:
        verdict(task=task, actor=submitter, reason="looks fine to me")

    assert refused.value.code == "own_work"
    assert_unchanged(task, "in_review", events_before)


@pytest.mark.django_db
@pytest.mark.parametrize("role", [Role.AGENT, Role.VERIFIER, Role.MANAGER])
def test_only_reviewers_review(flow, role):
    task, _ = flow.in_review()
    events_before = Event.objects.count()

    with pytest.raises(PermissionDenied):
        review.task_approve(task=task, actor=member(flow.project, role))

    assert_unchanged(task, "in_review", events_before)


@pytest.mark.django_db
def test_reviewer_of_another_project_cannot_review(flow, other_flow):
    task, _ = flow.in_review()
    events_before = Event.objects.count()

    with pytest.raises(PermissionDenied):
        review.task_approve(task=task, actor=other_flow.reviewer)

    assert_unchanged(task, "in_review", events_before)


@pytest.mark.django_db
def test_reopen_gives_a_failed_task_a_fresh_attempt_budget(flow):
    task, _ = flow.failed()

    services.task_reopen(task=task, actor=flow.manager, reason="spec clarified")

    task.refresh_from_db()
    assert (task.state, task.failed_attempts) == ("ready", 0)
    attempt = attempts.task_claim(agent=flow.agent)
    assert (attempt.task_id, attempt.number) == (task.pk, 2)


@pytest.mark.django_db
def test_a_stale_instance_cannot_overwrite_a_newer_state(flow):
    task = flow.ready()
    stale = Task.objects.get(pk=task.pk)
    services.task_cancel(task=task, actor=flow.manager)
    events_before = Event.objects.count()

    with pytest.raises(Conflict) as refused, transaction.atomic():
        fire(stale, "cancel", actor=flow.manager)

    assert refused.value.code == "concurrent_update"
    assert Task.objects.get(pk=task.pk).state == "cancelled"
    assert Event.objects.count() == events_before


@pytest.mark.django_db
def test_state_fields_cannot_be_assigned(flow):
    task = flow.ready()

    with pytest.raises(AttributeError, match="Direct state modification is not allowed"):
        task.state = "done"

    assert Task.objects.get(pk=task.pk).state == "ready"


@pytest.mark.django_db
def test_every_transition_moves_the_tasks_updated_at(flow):
    task = flow.draft()
    stamps = [Task.objects.get(pk=task.pk).updated_at]

    services.task_publish(task=task, actor=flow.manager)
    stamps.append(Task.objects.get(pk=task.pk).updated_at)
    attempts.task_claim(agent=flow.agent)
    stamps.append(Task.objects.get(pk=task.pk).updated_at)

    assert stamps == sorted(stamps) and len(set(stamps)) == 3


@pytest.mark.django_db
@pytest.mark.parametrize("state", ["claimed", "checking", "in_review"])
def test_withdraw_gives_the_task_back_without_spending_an_attempt(flow, state):
    task, attempt = getattr(flow, state)(max_attempts=1)

    assert attempts.attempt_withdraw(attempt=attempt, reason="pull request #1 closed") is True

    task.refresh_from_db(), attempt.refresh_from_db()
    assert (task.state, task.failed_attempts, task.current_attempt_id) == ("ready", 0, None)
    assert (attempt.state, attempt.end_reason) == ("released", "pull request #1 closed")
    event = Event.objects.filter(task=task, transition="withdraw").get(object_key=task.key)
    assert (event.actor_id, event.from_state, event.reason) == (
        None,
        state,
        "pull request #1 closed",
    )
    # max_attempts=1, and the task can be claimed again.
    assert attempts.task_claim(agent=flow.agent2).task_id == task.pk


@pytest.mark.django_db
@pytest.mark.parametrize("state", ["claimed", "checking", "in_review"])
def test_a_withdraw_past_the_free_ones_fails_the_attempt_and_spends_one(flow, state):
    task, attempt = flow.claimed(max_attempts=2)
    for _ in range(attempts.WITHDRAWALS_FREE):
        assert attempts.attempt_withdraw(attempt=attempt, reason="closed") is True
        attempt = attempts.task_claim(agent=flow.agent)
    if state != "claimed":
        attempt = attempts.attempt_submit(
            attempt=attempt, actor=flow.agent, summary="done", change={"commit": "a" * 40}
        )
    if state == "in_review":
        attempt = attempts.attempt_gates_passed(attempt=attempt)

    assert attempts.attempt_withdraw(attempt=attempt, reason="pull request #3 closed") is True

    task.refresh_from_db(), attempt.refresh_from_db()
    assert (task.state, task.failed_attempts, task.current_attempt_id) == ("ready", 1, None)
    assert attempt.state == "failed"
    assert attempt.end_reason == (
        "pull request #3 closed; this task's pull requests were closed 3 times, more than the"
        " 2 that are free, so this attempt counts as failed (1 of 2 attempts used)"
    )
    events = Event.objects.filter(task=task, transition="withdraw", object_key=task.key)
    assert [e.to_state for e in events.order_by("pk")] == ["ready", "ready", "ready"]


@pytest.mark.django_db
@pytest.mark.parametrize("state", ["done", "approved_then_rejected", "withdrawn"])
def test_withdraw_leaves_an_attempt_that_is_no_longer_live(flow, state):
    if state == "done":
        task, attempt = flow.done()
    elif state == "withdrawn":
        task, attempt = flow.in_review()
        attempts.attempt_withdraw(attempt=attempt, reason="closed")
    else:
        task, attempt = flow.in_review()
        review.task_reject(task=task, actor=flow.reviewer, reason="no")
    task.refresh_from_db()
    before = (task.state, task.failed_attempts, Event.objects.count())

    assert attempts.attempt_withdraw(attempt=attempt, reason="closed again") is False

    task.refresh_from_db()
    assert (task.state, task.failed_attempts, Event.objects.count()) == before


@pytest.mark.django_db
@pytest.mark.parametrize("model", ["task", "attempt"])
def test_withdraw_is_the_systems_alone(flow, model):
    task, attempt = flow.in_review()
    instance = (
        Task.objects.get(pk=task.pk) if model == "task" else Attempt.objects.get(pk=attempt.pk)
    )
    kwargs = {} if model == "task" else {"end_reason": "x"}
    events_before = Event.objects.count()

    with pytest.raises(PermissionDenied) as refused, transaction.atomic():
        fire(instance, "withdraw", actor=flow.manager, **kwargs)

    assert refused.value.code == "system_only"
    assert_unchanged(task, "in_review", events_before)
