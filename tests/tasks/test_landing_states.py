"""A task's side of the merge queue (tasks.landing): queued, landed, returned, dequeued.

Each transition is checked on its own, without a repository: the lander's calls are made
directly, as the lander makes them."""

import pytest
from django.core.exceptions import ValidationError

from projects.errors import Conflict, PermissionDenied
from projects.models import Event
from tasks import review
from tasks.landing import (
    heads_noted,
    landing_queue,
    pull_noted,
    task_dequeue,
    task_land,
    task_landing_return,
)
from tests.factories import all_met


@pytest.fixture
def queued(flow):
    """``queued()``: a task approved with landing on, and its attempt."""
    flow.project.repository_url = "https://git.example.org/fm.git"
    flow.project.verify = {"test": "true", "junit": "junit.xml"}
    flow.project.landing = {"mode": "push", "method": "squash", "batch_max": 4, "target_branch": ""}
    flow.project.save()

    def make(**kwargs):
        task, attempt = flow.in_review(**kwargs)
        review.task_approve(task=task, actor=flow.reviewer, criteria=all_met(attempt))
        task.refresh_from_db(), attempt.refresh_from_db()
        return task, attempt

    return make


def test_the_queue_is_in_approval_order(queued, flow):
    first, _ = queued()
    second, _ = queued()

    assert [a.task.key for a in landing_queue(flow.project.pk)] == [first.key, second.key]


def test_landing_marks_the_task_done_at_its_commit_once(queued):
    task, attempt = queued()

    assert task_land(attempt=attempt, commit="f" * 40, batch=7, seconds=1.5) is True
    assert task_land(attempt=attempt, commit="e" * 40, batch=8, seconds=2.0) is False

    task.refresh_from_db(), attempt.refresh_from_db()
    assert (task.state, task.landed_commit) == ("done", "f" * 40)
    assert attempt.landing["state"] == "landed" and attempt.landing["batch"] == 7
    assert Event.objects.filter(task=task, transition="land").count() == 1


def test_a_returned_change_sends_the_task_back_without_spending_an_attempt(queued):
    task, attempt = queued()

    task_landing_return(
        attempt=attempt,
        state="conflict",
        reason="conflict in calc.py",
        details={"paths": ["calc.py"]},
    )

    task.refresh_from_db(), attempt.refresh_from_db()
    assert (task.state, task.failed_attempts, task.current_attempt_id) == ("ready", 0, None)
    assert attempt.state == "approved"
    assert attempt.landing["paths"] == ["calc.py"]
    assert attempt.landing["reason"] == "conflict in calc.py"


def test_a_change_sent_back_from_its_pull_request_keeps_what_the_lander_noted_there(queued):
    _task, attempt = queued()
    note = {"number": 4, "branch": "fm/x", "heads": ["a" * 40]}
    attempt.landing = {**attempt.landing, "pull": note}
    attempt.save(update_fields=["landing"])

    task_landing_return(
        attempt=attempt, state="failed", reason="its branch moved", details={"pull": 4}
    )

    attempt.refresh_from_db()
    assert pull_noted(attempt.landing) == note
    assert heads_noted(attempt.landing) == [attempt.landing["commit"], "a" * 40]
    # A record written before the note was kept: only the number.
    assert pull_noted({"pull": 4}) == {"number": 4}
    assert (pull_noted({}), heads_noted({})) == ({}, [""])


def test_a_manager_takes_a_task_back_to_review_and_the_approval_is_withdrawn(queued, flow):
    task, attempt = queued()

    task_dequeue(task=task, actor=flow.manager, to="in_review", reason="the spec changed")

    task.refresh_from_db(), attempt.refresh_from_db()
    assert (task.state, attempt.state, attempt.reviewed_by) == ("in_review", "passed", None)
    assert attempt.queued_at is None
    assert attempt.landing["state"] == "dequeued"
    assert list(landing_queue(flow.project.pk)) == []


def test_a_manager_sends_a_queued_task_back_to_ready_and_the_attempt_keeps_its_approval(
    queued, flow
):
    task, attempt = queued()

    task_dequeue(task=task, actor=flow.manager, to="ready", reason="do it again smaller")

    task.refresh_from_db(), attempt.refresh_from_db()
    assert (task.state, attempt.state) == ("ready", "approved")
    assert attempt.landing["reason"] == "do it again smaller"


@pytest.mark.parametrize(
    ("to", "reason", "fields"),
    [("done", "why", {"to"}), ("ready", "  ", {"reason"}), ("merged", "", {"to", "reason"})],
)
def test_a_dequeue_without_a_place_or_a_reason_is_refused_and_changes_nothing(
    queued, flow, to, reason, fields
):
    task, _ = queued()

    with pytest.raises(ValidationError) as refused:
        task_dequeue(task=task, actor=flow.manager, to=to, reason=reason)

    assert set(refused.value.message_dict) == fields
    task.refresh_from_db()
    assert task.state == "approved"


def test_only_a_manager_takes_a_task_out_of_the_queue(queued, flow):
    task, _ = queued()

    with pytest.raises(PermissionDenied):
        task_dequeue(task=task, actor=flow.reviewer, to="ready", reason="mine")

    task.refresh_from_db()
    assert task.state == "approved"


def test_a_task_in_a_batch_being_landed_cannot_be_taken_out(queued, flow):
    task, attempt = queued()
    attempt.landing = {**attempt.landing, "state": "landing", "batch": 3}
    attempt.save(update_fields=["landing"])

    with pytest.raises(Conflict) as refused:
        task_dequeue(task=task, actor=flow.manager, to="ready", reason="now")

    assert refused.value.code == "landing_in_progress"
    task.refresh_from_db()
    assert task.state == "approved"
