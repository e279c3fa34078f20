"""The merge queue's API: the queue, batches and pace (members), and a manager's dequeue.

The state is built with the real services and Batch rows; no lander runs (the one test
that runs it on a real origin is in test_pages.py). A refusal changes nothing.
"""

from datetime import timedelta

import pytest
from django.utils import timezone

from landing.models import Batch, BatchState
from landing.selectors import landed_in_last_hour
from projects.models import Event, Project
from projects.verify import LANDING_DEFAULTS
from tasks.landing import attempt_landing_note, task_land, task_landing_return
from tests.factories import member
from tests.landing.conftest import (
    LANDING,
    backing_off,
    lander_at_work,
    lander_snapshot,
    queued,
    snapshot,
)

pytestmark = pytest.mark.django_db


def url(slug, key=None):
    base = f"/api/v1/projects/{slug}/landing/"
    return f"{base}{key}/dequeue/" if key else base


def test_members_see_the_queue_in_landing_order(api, lands):
    first, one = queued(lands, "First")
    second, two = queued(lands, "Second")

    answer = api(lands.agent).get(url("FM"))

    assert answer.status_code == 200
    body = answer.json()
    assert body["landing"] == {**LANDING_DEFAULTS, **LANDING}
    assert body["target"] == "main"
    assert body["queued"] == 2
    assert body["queue"] == [
        {
            "position": 1,
            "task": first.key,
            "title": "First",
            "attempt": one.pk,
            "commit": "abc1230000000000000000000000000000000000",
            "queued_at": one.queued_at.isoformat().replace("+00:00", "Z"),
            "state": "queued",
            "batch": None,
            "reason": "",
            "lane": "normal",
            "fast": None,
        },
        {
            "position": 2,
            "task": second.key,
            "title": "Second",
            "attempt": two.pk,
            "commit": "abc1230000000000000000000000000000000000",
            "queued_at": two.queued_at.isoformat().replace("+00:00", "Z"),
            "state": "queued",
            "batch": None,
            "reason": "",
            "lane": "normal",
            "fast": None,
        },
    ]
    assert body["batches"] == []
    assert body["landed_per_hour"] == 0


def test_batches_show_newest_first_with_each_change_and_what_it_cost(api, lands):
    task, attempt = queued(lands)
    old = Batch.objects.create(project=lands.project, target="main", method="squash")
    batch = Batch.objects.create(
        project=lands.project,
        state=BatchState.RETURNED,
        target="main",
        method="squash",
        base="b" * 40,
        changes=[
            {
                "attempt": attempt.pk,
                "task": task.key,
                "commit": "abc1230000000000000000000000000000000000",
            }
        ],
        verify_runs=3,
        bisect_steps=1,
        reason="",
        seconds=2.5,
    )

    body = api(lands.reviewer).get(url("FM")).json()

    assert [b["id"] for b in body["batches"]] == [batch.pk, old.pk]
    shown = body["batches"][0]
    assert shown["state"] == "returned"
    assert (shown["base"], shown["result"]) == ("b" * 40, "")
    assert (shown["verify_runs"], shown["bisect_steps"], shown["pushes"]) == (3, 1, 0)
    assert shown["seconds"] == 2.5
    assert shown["ended_at"] is None
    # A change the lander had not judged yet shows as still queued.
    assert shown["changes"] == [
        {
            "attempt": attempt.pk,
            "task": task.key,
            "commit": "abc1230000000000000000000000000000000000",
            "built": "",
            "outcome": "queued",
            "reason": "",
        }
    ]


def test_a_queued_change_in_a_batch_shows_its_batch_and_an_error_says_why(api, lands):
    _, attempt = queued(lands)
    attempt_landing_note(attempt=attempt, state="error", batch=7, reason="nothing landed: offline")

    row = api(lands.agent).get(url("FM")).json()["queue"][0]

    assert (row["state"], row["batch"], row["reason"]) == (
        "error",
        7,
        "nothing landed: offline",
    )


def test_landed_changes_leave_the_queue_and_count_in_the_hour(api, lands):
    _, one = queued(lands, "First")
    second, _ = queued(lands, "Second")
    task_land(attempt=one, commit="c" * 40, batch=None, seconds=1.0)

    body = api(lands.agent).get(url("FM")).json()

    assert [row["task"] for row in body["queue"]] == [second.key]
    assert body["landed_per_hour"] == 1
    later = timezone.now() + timedelta(hours=1, seconds=1)
    assert landed_in_last_hour(lands.project, now=later) == 0


def test_other_projects_queues_are_not_found(api, lands, other_flow):
    queued(lands)

    answer = api(other_flow.manager).get(url("FM"))

    assert answer.status_code == 404
    assert answer.json()["code"] == "not_found"


def test_a_manager_sends_a_queued_task_back_to_review(api, lands):
    task, attempt = queued(lands)

    answer = api(lands.manager).post(
        url("FM", task.key), {"to": "in_review", "reason": "wrong approach"}, format="json"
    )

    assert answer.status_code == 200
    assert (answer.json()["key"], answer.json()["state"]) == (task.key, "in_review")
    attempt.refresh_from_db()
    assert (attempt.state, attempt.queued_at) == ("passed", None)
    assert attempt.landing["state"] == "dequeued"
    event = Event.objects.filter(task=task, transition="dequeue").get()
    assert (event.reason, event.extra, event.actor) == (
        "wrong approach",
        {"to": "in_review"},
        lands.manager,
    )
    assert api(lands.agent).get(url("FM")).json()["queue"] == []


def test_a_manager_sends_a_queued_task_back_to_ready(api, lands):
    task, attempt = queued(lands)

    answer = api(lands.manager).post(
        url("FM", task.key), {"to": "ready", "reason": "redo it on the new API"}, format="json"
    )

    assert answer.status_code == 200
    assert (answer.json()["state"], answer.json()["current_attempt"]) == ("ready", None)
    attempt.refresh_from_db()
    assert attempt.state == "approved"
    assert attempt.landing == {
        "state": "dequeued",
        "commit": "abc1230000000000000000000000000000000000",
        "change_id": "",
        "reason": "redo it on the new API",
    }


def test_dequeue_names_a_missing_reason_and_a_wrong_destination(api, lands):
    task, _ = queued(lands)
    before = snapshot(task)

    answer = api(lands.manager).post(url("FM", task.key), {"to": "done"}, format="json")

    assert answer.status_code == 400
    assert sorted(answer.json()["fields"]) == ["reason", "to"]
    assert snapshot(task) == before


def test_dequeue_refuses_fields_it_does_not_take(api, lands):
    task, _ = queued(lands)
    before = snapshot(task)

    answer = api(lands.manager).post(
        url("FM", task.key), {"to": "ready", "reason": "r", "state": "done"}, format="json"
    )

    assert answer.status_code == 400
    assert answer.json()["fields"] == {"state": ["unknown field"]}
    assert snapshot(task) == before


@pytest.mark.parametrize("role", ["agent", "reviewer", "verifier"])
def test_only_managers_dequeue(api, lands, role):
    task, _ = queued(lands)
    before = snapshot(task)

    answer = api(getattr(lands, role)).post(
        url("FM", task.key), {"to": "ready", "reason": "mine"}, format="json"
    )

    assert answer.status_code == 403
    assert snapshot(task) == before


def test_an_unknown_key_is_not_found(api, lands):
    task, _ = queued(lands)
    before = snapshot(task)

    answer = api(lands.manager).post(
        url("FM", "FM-999"), {"to": "ready", "reason": "r"}, format="json"
    )

    assert answer.status_code == 404
    assert snapshot(task) == before


def test_another_projects_task_is_not_found_through_this_project(api, lands, other_flow):
    Project.objects.filter(pk=other_flow.project.pk).update(landing=LANDING)
    other_flow.project.refresh_from_db()
    other_flow.gates({})
    theirs, _ = queued(other_flow)
    member(other_flow.project, "manager", lands.manager.username)
    assert api(lands.manager).get(url("OT")).json()["queued"] == 1
    before = snapshot(theirs)

    answer = api(lands.manager).post(
        url("FM", theirs.key), {"to": "ready", "reason": "r"}, format="json"
    )

    assert answer.status_code == 404
    assert snapshot(theirs) == before


def test_a_project_the_caller_is_not_in_is_not_found(api, lands, other_flow):
    task, _ = queued(lands)
    before = snapshot(task)

    answer = api(other_flow.manager).post(
        url("FM", task.key), {"to": "ready", "reason": "r"}, format="json"
    )

    assert answer.status_code == 404
    assert snapshot(task) == before


def test_a_task_that_is_not_queued_is_a_conflict(api, lands):
    task, _ = lands.in_review()
    before = snapshot(task)

    answer = api(lands.manager).post(
        url("FM", task.key), {"to": "ready", "reason": "r"}, format="json"
    )

    assert answer.status_code == 409
    assert answer.json()["code"] == "invalid_state"
    assert snapshot(task) == before


def test_a_task_that_came_back_from_landing_is_a_conflict(api, lands):
    task, attempt = queued(lands)
    task_landing_return(attempt=attempt, state="conflict", reason="conflict in calc.py")
    before = snapshot(task)

    answer = api(lands.manager).post(
        url("FM", task.key), {"to": "ready", "reason": "r"}, format="json"
    )

    assert answer.status_code == 409
    assert snapshot(task) == before


def test_a_task_in_a_batch_being_landed_is_a_conflict(api, lands):
    task, attempt = queued(lands)
    attempt_landing_note(attempt=attempt, state="landing", batch=3)
    before = snapshot(task)

    with lander_at_work(lands.project.pk):
        answer = api(lands.manager).post(
            url("FM", task.key), {"to": "ready", "reason": "r"}, format="json"
        )

    assert answer.status_code == 409
    assert answer.json()["code"] == "landing_in_progress"
    assert snapshot(task) == before


def test_the_handoff_of_a_queued_task_says_what_comes_next(api, lands):
    task, _ = queued(lands)

    answer = api(lands.agent).get(f"/api/v1/tasks/{task.key}/handoff/")

    assert answer.status_code == 200
    assert answer.json()["what_remains_open"]["next"] == (
        "the merge queue lands its approved change, or sends it back with why"
    )


# --- The lander's back-off, and a manager's retry ----------------------------------------------


def test_members_see_that_the_lander_backs_off_why_and_since_when(api, lands):
    task, attempt = queued(lands)
    assert api(lands.agent).get(url("FM")).json()["lander"]["state"] == "ready"
    lander = backing_off(lands, attempt)

    shown = api(lands.agent).get(url("FM")).json()["lander"]

    assert shown == {
        "state": "backing_off",
        "reason": "nothing landed: the target itself fails its tests",
        "since": lander.since.isoformat().replace("+00:00", "Z"),
        "tip": "a" * 40,
        "head": task.key,
        "batch": lander.batch_id,
        "verified": True,
        "wake_at": lander.wake_at.isoformat().replace("+00:00", "Z"),
        "paused": None,
    }


def test_a_manager_wakes_the_lander_with_a_reason_as_an_event(
    api, lands, django_capture_on_commit_callbacks
):
    _, attempt = queued(lands)
    backing_off(lands, attempt)

    with django_capture_on_commit_callbacks() as sent:
        answer = api(lands.manager).post(
            f"{url('FM')}retry/", {"reason": "main is fixed"}, format="json"
        )

    assert answer.status_code == 200
    assert answer.json()["lander"] == {
        "state": "ready",
        "reason": "",
        "since": None,
        "tip": "",
        "head": None,
        "batch": None,
        "verified": False,
        "wake_at": None,
        "paused": None,
    }
    assert len(sent) == 1  # the lander's job, once this commits
    event = Event.objects.get(transition="retry")
    assert (event.actor, event.reason, event.extra["tip"]) == (
        lands.manager,
        "main is fixed",
        "a" * 40,
    )


@pytest.mark.parametrize("role", ["agent", "reviewer", "verifier"])
def test_only_managers_wake_the_lander(api, lands, role, django_capture_on_commit_callbacks):
    _, attempt = queued(lands)
    backing_off(lands, attempt)
    before = lander_snapshot(lands.project)

    with django_capture_on_commit_callbacks() as sent:
        answer = api(getattr(lands, role)).post(f"{url('FM')}retry/", {}, format="json")

    assert answer.status_code == 403
    assert (lander_snapshot(lands.project), sent) == (before, [])


def test_waking_a_lander_that_does_not_back_off_is_a_conflict(
    api, lands, django_capture_on_commit_callbacks
):
    queued(lands)
    before = lander_snapshot(lands.project)

    with django_capture_on_commit_callbacks() as sent:
        answer = api(lands.manager).post(f"{url('FM')}retry/", {}, format="json")

    assert answer.status_code == 409
    assert answer.json()["code"] == "not_backing_off"
    assert (lander_snapshot(lands.project), sent) == (before, [])


def test_an_outsider_finds_no_lander_to_wake(api, lands, other_flow):
    _, attempt = queued(lands)
    backing_off(lands, attempt)
    before = lander_snapshot(lands.project)

    answer = api(other_flow.manager).post(f"{url('FM')}retry/", {}, format="json")

    assert answer.status_code == 404
    assert lander_snapshot(lands.project) == before
