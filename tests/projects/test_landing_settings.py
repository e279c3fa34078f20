"""A project's landing setting (the merge queue): set through the one service, each bad
field a 400 naming it, push only with a repository and the runner; recorded as an Event;
a refusal changes nothing. An approval then queues the task instead of finishing it."""

import threading
import time

import pytest
from django.db import connections, transaction

from projects.models import Event, Project
from tasks import review
from tasks.models import Attempt
from tests.conftest import postgres_only
from tests.factories import all_met

VERIFY = {"test": "python3 run_tests.py", "junit": "reports/junit.xml"}
READY = {
    "repository_url": "https://git.example.org/fm.git",
    "verify": VERIFY,
    "gate_policy": {"runner": {}},
}


def patch(api, flow, **body):
    return api(flow.manager).patch(f"/api/v1/projects/{flow.project.slug}/", body, format="json")


def test_landing_is_off_until_a_manager_turns_it_on(flow, api):
    body = api(flow.agent).get(f"/api/v1/projects/{flow.project.slug}/").json()

    assert body["landing"] == {
        "mode": "off",
        "method": "squash",
        "batch_max": 4,
        "target_branch": "",
        "quarantine_after": 0,
        "release_after": 20,
    }


def test_a_manager_turns_landing_on_and_it_is_on_record_with_its_defaults(flow, api):
    response = patch(api, flow, **READY, landing={"mode": "push", "batch_max": 8})

    assert response.status_code == 200
    expected = {
        "mode": "push",
        "method": "squash",
        "batch_max": 8,
        "target_branch": "",
        "quarantine_after": 0,
        "release_after": 20,
    }
    assert response.json()["landing"] == expected
    event = Event.objects.filter(transition="edit").latest("id")
    assert "landing" in event.extra["fields"]
    assert event.extra["landing"] == expected


@pytest.mark.parametrize(
    ("landing", "errors"),
    [
        ({"mode": "merge-queue"}, {"landing.mode": ["choose one of off, push, pull_request"]}),
        ({"method": "rebase"}, {"landing.method": ["choose one of squash, merge"]}),
        ({"batch_max": 0}, {"landing.batch_max": ["a whole number from 1 to 16"]}),
        ({"batch_max": 17}, {"landing.batch_max": ["a whole number from 1 to 16"]}),
        ({"batch_max": True}, {"landing.batch_max": ["a whole number from 1 to 16"]}),
        ({"target_branch": "../main"}, {"landing.target_branch"}),
        ({"force": True}, {"landing.force": ["unknown field"]}),
        ("push", {"landing"}),
    ],
)
def test_a_bad_landing_field_is_a_400_naming_it_and_changes_nothing(flow, api, landing, errors):
    before = Event.objects.count()

    response = patch(api, flow, landing=landing)

    assert response.status_code == 400
    fields = response.json()["fields"]
    if isinstance(errors, dict):
        assert fields == errors
    else:
        assert set(fields) == errors
    flow.project.refresh_from_db()
    assert flow.project.landing["mode"] == "off"
    assert Event.objects.count() == before


def test_push_without_a_repository_and_the_runner_is_409_and_changes_nothing(flow, api):
    before = Event.objects.count()

    response = patch(api, flow, landing={"mode": "push"})

    assert response.status_code == 409
    assert response.json() == {
        "detail": "landing mode push needs repository_url (the repository to land on) and the "
        "runner in the gate policy (it verifies the merged tree)",
        "code": "landing_unconfigured",
    }
    flow.project.refresh_from_db()
    assert flow.project.landing["mode"] == "off"
    assert Event.objects.count() == before


def test_only_managers_change_landing(flow, api):
    response = api(flow.reviewer).patch(
        f"/api/v1/projects/{flow.project.slug}/", {"landing": {"mode": "off"}}, format="json"
    )

    assert response.status_code == 403


def test_with_landing_on_an_approval_queues_the_task_with_its_approved_commit(flow, api):
    task, attempt = flow.in_review()
    assert patch(api, flow, **READY, landing={"mode": "push"}).status_code == 200
    flow.project.refresh_from_db()

    review.task_approve(task=task, actor=flow.reviewer, criteria=all_met(attempt))

    task.refresh_from_db(), attempt.refresh_from_db()
    assert (task.state, attempt.state) == ("approved", "approved")
    assert attempt.landing == {
        "state": "queued",
        "commit": "abc1230000000000000000000000000000000000",
        "change_id": "",
    }
    assert attempt.queued_at == attempt.ended_at
    shown = api(flow.agent).get(f"/api/v1/attempts/{attempt.pk}/").json()
    assert shown["landing"] == attempt.landing
    assert api(flow.agent).get(f"/api/v1/tasks/{task.key}/").json()["landed_commit"] == ""


def test_an_approval_of_a_commit_the_runner_never_verified_and_named_short_is_refused(flow, api):
    # Submitted before full ids were required, with no runner: the queue would hold a name.
    task, attempt = flow.in_review()
    Attempt.objects.filter(pk=attempt.pk).update(change={"commit": "c0ffee1234"})
    assert patch(api, flow, **READY, landing={"mode": "push"}).status_code == 200
    events = Event.objects.count()

    refused = api(flow.reviewer).post(
        f"/api/v1/tasks/{task.key}/review/",
        {"verdict": "approve", "criteria": all_met(attempt)},
        format="json",
    )

    assert (refused.status_code, refused.json()["code"]) == (409, "no_commit")
    assert refused.json()["detail"] == (
        f"{attempt} names 'c0ffee1234', not a full commit id, and the runner verified none; "
        "with landing on, the queue lands only a commit the runner verified or a full object "
        "id (40 hex digits): ask for a new attempt that names its commit in full"
    )
    task.refresh_from_db(), attempt.refresh_from_db()
    assert (task.state, attempt.state, attempt.landing, Event.objects.count()) == (
        "in_review",
        "passed",
        {},
        events,
    )


def test_the_reviewer_sees_on_the_page_why_such_an_approval_is_refused(flow, api, client):
    task, attempt = flow.in_review()
    Attempt.objects.filter(pk=attempt.pk).update(change={"commit": "c0ffee1234"})
    assert patch(api, flow, **READY, landing={"mode": "push"}).status_code == 200
    client.force_login(flow.reviewer)

    page = client.post(f"/tasks/{task.key}/review/", {"verdict": "approve"})

    assert page.status_code == 400
    assert "names &#x27;c0ffee1234&#x27;, not a full commit id" in page.content.decode()
    task.refresh_from_db()
    assert task.state == "in_review"


def test_with_landing_off_an_approval_finishes_the_task_as_before(flow, api):
    task, attempt = flow.in_review()

    review.task_approve(task=task, actor=flow.reviewer, criteria=all_met(attempt))

    task.refresh_from_db(), attempt.refresh_from_db()
    assert (task.state, attempt.queued_at, attempt.landing) == ("done", None, {})
    shown = api(flow.agent).get(f"/api/v1/attempts/{attempt.pk}/").json()
    assert shown["landing"] is None


def test_landing_mode_cannot_change_while_changes_wait_and_the_409_names_them(flow, api):
    task, attempt = flow.in_review()
    assert patch(api, flow, **READY, landing={"mode": "push"}).status_code == 200
    review.task_approve(task=task, actor=flow.reviewer, criteria=all_met(attempt))
    flow.project.refresh_from_db()
    before = (flow.project.landing, Event.objects.count())

    response = patch(api, flow, landing={"mode": "off"})

    assert response.status_code == 409
    body = response.json()
    assert body["code"] == "landing_queued"
    assert body["queued"] == [task.key]
    assert f"while 1 change waits to land or be reverted: {task.key}" in body["detail"]
    flow.project.refresh_from_db()
    task.refresh_from_db()
    assert (flow.project.landing, Event.objects.count()) == before
    assert task.state == "approved"


def test_other_landing_fields_change_while_changes_wait(flow, api):
    task, attempt = flow.in_review()
    assert patch(api, flow, **READY, landing={"mode": "push"}).status_code == 200
    review.task_approve(task=task, actor=flow.reviewer, criteria=all_met(attempt))

    response = patch(api, flow, landing={"mode": "push", "batch_max": 8})

    assert response.status_code == 200
    flow.project.refresh_from_db()
    assert flow.project.landing_settings["batch_max"] == 8


def test_landing_mode_changes_once_the_queue_is_empty(flow, api):
    assert patch(api, flow, **READY, landing={"mode": "push"}).status_code == 200

    response = patch(api, flow, landing={"mode": "off"})

    assert response.status_code == 200
    flow.project.refresh_from_db()
    assert flow.project.landing_settings["mode"] == "off"


def _waiting_on_a_lock(deadline: float = 20.0) -> bool:
    """Whether another backend is now waiting for a row lock (polled, not slept)."""
    started = time.monotonic()
    with connections["default"].cursor() as cursor:
        while time.monotonic() - started < deadline:
            # Inside a transaction the statistics are a snapshot taken at the first look.
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            )
            if cursor.fetchone()[0]:
                return True
            time.sleep(0.05)
    return False


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_an_approval_racing_landing_switched_off_waits_and_finishes_the_task(flow, api):
    # The mode change locks the project row; the approval, which reads the mode to choose
    # approved (queued) or done, must wait for it and read the mode it committed. Reading
    # the row unlocked, it queued a task in a project that no longer lands.
    flow.gates({})  # committed here, the submission's gates run: none, so it waits for review
    task, attempt = flow.in_review()
    assert patch(api, flow, **READY, landing={"mode": "push"}).status_code == 200
    outcome: list = []

    def approve():
        try:
            review.task_approve(task=task, actor=flow.reviewer, criteria=all_met(attempt))
            outcome.append("approved")
        except Exception as exc:  # the test reads what it met
            outcome.append(exc)
        finally:
            connections.close_all()  # this thread's own

    with transaction.atomic():
        project = Project.objects.select_for_update(no_key=True).get(pk=flow.project.pk)
        project.landing = {**project.landing, "mode": "off"}
        project.save(update_fields=["landing"])
        approver = threading.Thread(target=approve)
        approver.start()
        assert _waiting_on_a_lock(), f"the approval did not wait for the project row: {outcome}"
    approver.join(30)

    assert outcome == ["approved"]
    task.refresh_from_db(), attempt.refresh_from_db()
    assert (task.state, attempt.state, attempt.landing) == ("done", "approved", {})
