"""Undo (issue 34, item 6; docs/landing.md, "Undo"): a manager reverts a landed change. The
lander lands the revert like any change (verified on the target as it is, in its turn or
the fast lane); the task reopens with the reason; the trail links the two commits.

The lander's tests run on a real origin repository with the runner scripted (``script``:
each tree's tests read from git); the faces' tests build a landed task without one.
"""

import pytest

from events.payloads import envelope
from events.types import type_of
from landing.lander import land
from landing.locks import LockLost
from landing.models import Batch, BatchState
from landing.services import landing_fast, revert_cancel, revert_request
from projects.errors import Conflict, PermissionDenied
from projects.models import Event, Project
from tasks import attempts
from tasks.context import build
from tasks.landing import (
    LAND_JOB,
    approval_to_carry,
    attempt_revert_note,
    revert_queue,
    task_land,
    task_revert_land,
)
from tasks.models import Attempt, Task
from tasks.reconciler import reconcile
from tests.landing.conftest import LANDING, feature, lander_at_work, queued

LANDED = "b" * 40


def landed(flow, title="A change"):
    """A task whose approved change landed at ``LANDED`` (no repository: the faces' tests)."""
    task, attempt = queued(flow, title)
    task_land(attempt=attempt, commit=LANDED, batch=None, seconds=1.0)
    task.refresh_from_db()
    attempt.refresh_from_db()
    return task, attempt


def state_of(task):
    """What a refusal must leave as it was."""
    task = Task.objects.get(pk=task.pk)
    attempt = Attempt.objects.get(pk=task.current_attempt_id)
    return (
        task.state,
        task.landed_commit,
        attempt.landing,
        attempt.revert_at,
        attempt.fast_at,
        Event.objects.count(),
    )


def test_a_landed_change_is_reverted_on_the_target_and_the_task_reopens(
    queue, origin, flow, script
):
    task, attempt = queue.approved(feature("alpha"), branch="alpha", title="Add alpha")
    land(flow.project)
    task.refresh_from_db()
    landed_at = task.landed_commit

    revert_request(task=task, actor=flow.manager, reason="alpha broke the nightly export")
    counts = land(flow.project)

    tip = origin.tip()
    assert counts["reverted"] == 1
    assert origin.first_parents(landed_at) == [tip]
    assert "alpha.py" not in origin.files(tip)
    assert origin.message(tip).splitlines()[0] == f"Revert {task.key}: Add alpha"
    assert f"This reverts commit {landed_at}." in origin.message(tip)
    assert f"Factory-Reverts: {landed_at}" in origin.message(tip)
    task.refresh_from_db()
    attempt.refresh_from_db()
    assert (task.state, task.landed_commit, task.current_attempt_id) == ("ready", "", None)
    assert attempt.landing["state"] == "reverted"
    assert attempt.landing["revert"]["commit"] == tip
    assert attempt.landing["revert"]["reverts"] == landed_at
    assert attempt.revert_at is None


def test_the_trail_links_the_landed_commit_and_its_revert_both_ways(queue, origin, flow, script):
    task, _ = queue.approved(feature("alpha"), branch="alpha", title="Add alpha")
    land(flow.project)
    task.refresh_from_db()
    landed_at = task.landed_commit

    revert_request(task=task, actor=flow.manager, reason="wrong fix")
    land(flow.project)

    tip = origin.tip()
    asked = Event.objects.get(task=task, transition="revert_requested")
    done = Event.objects.get(task=task, transition="revert")
    assert (asked.actor, asked.reason, asked.extra["reverts"]) == (
        flow.manager,
        "wrong fix",
        landed_at,
    )
    assert (done.from_state, done.to_state) == ("done", "ready")
    assert (done.extra["reverts"], done.extra["commit"]) == (landed_at, tip)
    assert done.extra["by"] == flow.manager.get_username()
    batch = Batch.objects.get(method="revert")
    assert (batch.state, batch.result, batch.base) == (BatchState.LANDED, tip, landed_at)
    assert batch.verify_runs == 1  # verified at exactly the tree it pushed
    assert batch.changes[0]["outcome"] == "reverted"


def test_a_revert_takes_out_only_its_own_change(queue, origin, flow, script):
    alpha, _ = queue.approved(feature("alpha"), branch="alpha", title="Add alpha")
    beta, _ = queue.approved(feature("beta"), branch="beta", title="Add beta")
    land(flow.project)
    alpha.refresh_from_db()

    revert_request(task=alpha, actor=flow.manager, reason="alpha goes")
    land(flow.project)

    files = origin.files(origin.tip())
    assert "alpha.py" not in files and "tests/test_alpha.py" not in files
    assert "beta.py" in files and "tests/test_beta.py" in files
    beta.refresh_from_db()
    assert beta.state == "done"


def test_a_merge_commit_is_reverted_against_the_target_it_landed_on(queue, origin, flow, script):
    queue.on(method="merge")
    queue.approved(feature("alpha"), branch="alpha", title="Add alpha")
    beta, _ = queue.approved(feature("beta"), branch="beta", title="Add beta")
    land(flow.project)
    beta.refresh_from_db()
    parents = origin._git(origin.bare, "rev-list", "--parents", "-n", "1", beta.landed_commit)
    assert len(parents.split()) == 3  # a merge commit: the target's tip, and beta's own

    revert_request(task=beta, actor=flow.manager, reason="beta goes")
    land(flow.project)

    files = origin.files(origin.tip())
    assert "beta.py" not in files and "alpha.py" in files
    assert origin.first_parents(beta.landed_commit) == [origin.tip()]


def test_the_next_context_carries_the_reason_of_the_revert(queue, origin, flow, script):
    task, _ = queue.approved(feature("alpha"), branch="alpha", title="Add alpha")
    land(flow.project)
    task.refresh_from_db()

    revert_request(task=task, actor=flow.manager, reason="it leaks file handles")
    land(flow.project)

    task.refresh_from_db()
    bundle = build(task, current=None)
    (earlier,) = bundle["attempts"]
    lesson = earlier["landing"]
    assert lesson["state"] == "reverted"
    assert lesson["reason"] == f"reverted by {flow.manager.get_username()}: it leaks file handles"
    assert lesson["what_to_do"].startswith("a manager reverted this change after it landed on main")


def test_a_revert_that_does_not_apply_comes_back_and_the_task_stays_done(
    queue, origin, flow, script
):
    task, attempt = queue.approved(feature("alpha"), branch="alpha", title="Add alpha")
    land(flow.project)
    task.refresh_from_db()
    landed_at = task.landed_commit
    tip = origin.person_pushes({"alpha.py": "def alpha():\n    return 'a person changed it'\n"})

    revert_request(task=task, actor=flow.manager, reason="alpha goes")
    land(flow.project)

    assert origin.tip() == tip
    task.refresh_from_db()
    attempt.refresh_from_db()
    assert (task.state, task.landed_commit) == ("done", landed_at)
    revert = attempt.landing["revert"]
    assert (revert["state"], revert["paths"]) == ("returned", ["alpha.py"])
    assert revert["why"].startswith(
        f"not reverted: the revert does not apply on main at {tip[:12]}"
    )
    event = Event.objects.get(task=task, transition="revert_returned")
    assert (event.from_state, event.to_state, event.reason) == ("done", "done", revert["why"])
    assert (attempt.landing["state"], attempt.revert_at) == ("landed", None)


def test_a_revert_whose_tests_fail_on_the_target_is_never_pushed(queue, origin, flow):
    # The sandbox runs the tests for real here: the revert's tree cannot import alpha.
    alpha, attempt = queue.approved(feature("alpha"), branch="alpha", title="Add alpha")
    land(flow.project)
    # A later change leans on alpha: taking alpha out breaks its test.
    uses = {
        "tests/test_uses.py": "import importlib.util\nimport unittest\n\n\n"
        "class UsesTest(unittest.TestCase):\n    def test_uses(self):\n"
        "        self.assertIsNotNone(importlib.util.find_spec('alpha'))\n"
    }
    queue.approved(uses, branch="uses", title="Use alpha")
    land(flow.project)
    tip = origin.tip()
    alpha.refresh_from_db()

    revert_request(task=alpha, actor=flow.manager, reason="alpha goes")
    land(flow.project)

    assert origin.tip() == tip
    alpha.refresh_from_db()
    attempt.refresh_from_db()
    assert alpha.state == "done"
    revert = attempt.landing["revert"]
    assert revert["state"] == "returned"
    assert revert["failing"] == ["tests/test_uses.py::UsesTest::test_uses"]
    assert revert["why"].startswith(f"not reverted: the revert fails on main at {tip[:12]}")
    assert Batch.objects.get(method="revert").state == BatchState.RETURNED


def test_a_change_that_was_on_the_target_already_is_not_reverted_at_someone_elses_commit(
    queue, origin, flow, script
):
    base = origin.base
    theirs = origin.person_pushes(feature("alpha"))  # a person landed the same change first
    task, attempt = queue.approve(*queue.in_review(feature("alpha"), branch="alpha", on=base))
    land(flow.project)
    task.refresh_from_db()
    assert task.landed_commit == theirs  # it added nothing: it landed as the commit it sat on

    revert_request(task=task, actor=flow.manager, reason="alpha goes")
    land(flow.project)

    assert origin.tip() == theirs
    attempt.refresh_from_db()
    assert attempt.landing["revert"]["state"] == "returned"
    assert attempt.landing["revert"]["why"] == (
        f"not reverted: the commit it landed at, {theirs[:12]}, does not carry {task.key} (its "
        "change was already on the target when it landed); revert it by hand"
    )


def test_a_revert_waits_its_turn_behind_changes_queued_before_it(queue, origin, flow, script):
    alpha, _ = queue.approved(feature("alpha"), branch="alpha", title="Add alpha")
    land(flow.project)
    alpha.refresh_from_db()
    beta, _ = queue.approved(feature("beta"), branch="beta", title="Add beta")

    revert_request(task=alpha, actor=flow.manager, reason="alpha goes")
    land(flow.project)

    batches = list(Batch.objects.order_by("pk").values_list("method", flat=True))
    assert batches == ["squash", "squash", "revert"]
    subjects = [origin.message(c).splitlines()[0] for c in origin.first_parents(origin.base)]
    assert subjects[1:] == [f"{beta.key}: Add beta", f"Revert {alpha.key}: Add alpha"]


def test_the_fast_lane_puts_a_revert_first(queue, origin, flow, script):
    alpha, _ = queue.approved(feature("alpha"), branch="alpha", title="Add alpha")
    land(flow.project)
    alpha.refresh_from_db()
    beta, _ = queue.approved(feature("beta"), branch="beta", title="Add beta")
    revert_request(task=alpha, actor=flow.manager, reason="alpha broke production")

    landing_fast(task=alpha, actor=flow.manager, reason="the incident")
    land(flow.project)

    subjects = [origin.message(c).splitlines()[0] for c in origin.first_parents(origin.base)]
    assert subjects[1:] == [f"Revert {alpha.key}: Add alpha", f"{beta.key}: Add beta"]
    event = Event.objects.get(task=alpha, transition="fast_lane")
    assert (event.reason, event.extra["revert"]) == ("the incident", True)
    assert Batch.objects.get(method="revert").verify_runs == 1  # first, never unverified


def test_a_lander_stopped_after_a_reverts_push_is_settled_from_git(
    queue, origin, flow, script, monkeypatch
):
    task, attempt = queue.approved(feature("alpha"), branch="alpha", title="Add alpha")
    land(flow.project)
    task.refresh_from_db()
    revert_request(task=task, actor=flow.manager, reason="alpha goes")

    def stop(**_):
        raise LockLost("the lock was taken over")  # as a lander that loses its lock stops

    with monkeypatch.context() as patched:
        patched.setattr("landing.reverting.task_revert_land", stop)
        assert land(flow.project)["lock_lost"] is True
    task.refresh_from_db()
    assert (task.state, Batch.objects.get(method="revert").state) == ("done", "pushing")
    counts = land(flow.project)

    task.refresh_from_db()
    attempt.refresh_from_db()
    assert counts["settled"] == 1
    assert (task.state, attempt.landing["revert"]["commit"]) == ("ready", origin.tip())
    assert Batch.objects.get(method="revert").state == BatchState.LANDED
    assert origin.first_parents(origin.base)[-1] == origin.tip()
    assert len(origin.first_parents(origin.base)) == 2  # the change and its revert, once


def test_the_approval_of_a_reverted_change_never_carries_over(lands):
    task, attempt = landed(lands)
    revert_request(task=task, actor=lands.manager, reason="wrong fix")
    task_revert_land(attempt=attempt, commit="c" * 40, batch=None)

    second = attempts.task_claim(agent=lands.agent, project=lands.project)
    carry = approval_to_carry(second)

    assert (carry.earlier, carry.carries) == (attempt, False)
    assert "did not come back from landing (reverted)" in carry.why


def test_the_reconciler_wakes_the_lander_of_a_queued_revert(lands, monkeypatch):
    task, _ = landed(lands)
    revert_request(task=task, actor=lands.manager, reason="wrong fix")
    woken = []
    monkeypatch.setattr("tasks.reconciler.enqueue", lambda *job: woken.append(job))

    counts = reconcile()

    assert (counts["landers_woken"], woken) == (1, [(LAND_JOB, lands.project.pk)])


# --- Who may, and what is refused -------------------------------------------------------------


def test_a_revert_request_queues_it_and_wakes_the_lander(lands, django_capture_on_commit_callbacks):
    task, attempt = landed(lands)

    with django_capture_on_commit_callbacks() as jobs:
        revert_request(task=task, actor=lands.manager, reason="  wrong fix  ")

    attempt.refresh_from_db()
    assert len(jobs) == 1
    assert [a.pk for a in revert_queue(lands.project.pk)] == [attempt.pk]
    assert attempt.landing["revert"] == {
        "state": "queued",
        "by": lands.manager.get_username(),
        "reason": "wrong fix",
        "at": attempt.revert_at.isoformat(),
        "reverts": LANDED,
    }


@pytest.mark.parametrize("role", ["agent", "reviewer", "verifier"])
def test_only_a_manager_reverts(lands, role, django_capture_on_commit_callbacks):
    task, _ = landed(lands)
    before = state_of(task)

    with django_capture_on_commit_callbacks() as jobs, pytest.raises(PermissionDenied):
        revert_request(task=task, actor=getattr(lands, role), reason="mine")

    assert (state_of(task), jobs) == (before, [])


@pytest.mark.parametrize("reason", ["", "   ", "a\x00b", "x" * 10_001])
def test_a_revert_needs_a_reason(lands, reason):
    task, _ = landed(lands)
    before = state_of(task)

    with pytest.raises(Exception) as refused:
        revert_request(task=task, actor=lands.manager, reason=reason)

    assert list(refused.value.message_dict) == ["reason"]
    assert state_of(task) == before


def test_a_change_that_has_not_landed_is_not_reverted(lands):
    task, _ = queued(lands)
    before = (Task.objects.get(pk=task.pk).state, Event.objects.count())

    with pytest.raises(Conflict) as refused:
        revert_request(task=task, actor=lands.manager, reason="too early")

    assert refused.value.code == "not_landed"
    assert (Task.objects.get(pk=task.pk).state, Event.objects.count()) == before


def test_a_second_revert_while_one_is_queued_is_refused_naming_it(lands):
    task, _ = landed(lands)
    revert_request(task=task, actor=lands.manager, reason="the first ask")
    before = state_of(task)

    with pytest.raises(Conflict) as refused:
        revert_request(task=task, actor=lands.manager, reason="again")

    assert refused.value.code == "revert_queued"
    assert f"asked by {lands.manager.get_username()}" in str(refused.value)
    assert "the first ask" in str(refused.value)
    assert state_of(task) == before


def test_a_project_that_no_longer_lands_through_its_lander_is_refused(lands):
    task, _ = landed(lands)
    Project.objects.filter(pk=lands.project.pk).update(landing={**LANDING, "mode": "off"})
    before = state_of(task)

    with pytest.raises(Conflict) as refused:
        revert_request(task=task, actor=lands.manager, reason="r")

    assert refused.value.code == "landing_off"
    assert state_of(task) == before


# --- Taking a queued revert back (issue 34, "Undo") --------------------------------------------


def test_a_cancelled_revert_is_never_landed_and_the_task_stays_done(queue, origin, flow, script):
    task, attempt = queue.approved(feature("alpha"), branch="alpha", title="Add alpha")
    land(flow.project)
    task.refresh_from_db()
    landed_at, tip = task.landed_commit, origin.tip()
    revert_request(task=task, actor=flow.manager, reason="alpha broke the export")

    revert_cancel(task=task, actor=flow.manager, reason="it was the export's own bug")
    counts = land(flow.project)

    assert (counts.get("reverted", 0), origin.tip()) == (0, tip)
    assert not Batch.objects.filter(method="revert").exists()
    task.refresh_from_db()
    attempt.refresh_from_db()
    assert (task.state, task.landed_commit, attempt.revert_at) == ("done", landed_at, None)
    assert attempt.landing["state"] == "landed"
    event = Event.objects.get(task=task, transition="revert_cancelled")
    assert (event.actor, event.reason, event.from_state, event.to_state) == (
        flow.manager,
        "it was the export's own bug",
        "done",
        "done",
    )
    assert event.extra == {"attempt": attempt.number, "reverts": landed_at}


def test_a_cancelled_revert_keeps_what_was_asked_and_says_who_cancelled_it(lands):
    task, attempt = landed(lands)
    revert_request(task=task, actor=lands.manager, reason="wrong fix")
    landing_fast(task=task, actor=lands.manager, reason="the incident")
    attempt.refresh_from_db()
    asked = attempt.landing["revert"]

    revert_cancel(task=task, actor=lands.manager, reason="  a false alarm  ")

    attempt.refresh_from_db()
    assert (attempt.revert_at, attempt.fast_at) == (None, None)
    assert list(revert_queue(lands.project.pk)) == []
    assert attempt.landing["revert"] == {
        **asked,
        "state": "cancelled",
        "cancelled": {
            "by": lands.manager.get_username(),
            "reason": "a false alarm",
            "at": attempt.landing["revert"]["cancelled"]["at"],
        },
    }


@pytest.mark.parametrize("role", ["agent", "reviewer", "verifier"])
def test_only_a_manager_cancels_a_revert(lands, role):
    task, _ = landed(lands)
    revert_request(task=task, actor=lands.manager, reason="wrong fix")
    before = state_of(task)

    with pytest.raises(PermissionDenied):
        revert_cancel(task=task, actor=getattr(lands, role), reason="mine")

    assert state_of(task) == before


@pytest.mark.parametrize("reason", ["", "   ", "a\x00b", "x" * 10_001])
def test_cancelling_a_revert_needs_a_reason(lands, reason):
    task, _ = landed(lands)
    revert_request(task=task, actor=lands.manager, reason="wrong fix")
    before = state_of(task)

    with pytest.raises(Exception) as refused:
        revert_cancel(task=task, actor=lands.manager, reason=reason)

    assert list(refused.value.message_dict) == ["reason"]
    assert state_of(task) == before


def test_there_is_nothing_to_cancel_without_a_queued_revert(lands):
    task, _ = landed(lands)
    before = state_of(task)

    with pytest.raises(Conflict) as refused:
        revert_cancel(task=task, actor=lands.manager, reason="oops")

    assert refused.value.code == "no_revert_queued"
    assert str(refused.value) == (
        f"no revert of {task.key} is queued to cancel: it is done, landed at {LANDED[:12]}"
    )
    assert state_of(task) == before


def test_a_revert_a_live_batch_has_taken_is_not_cancelled(lands):
    task, attempt = landed(lands)
    revert_request(task=task, actor=lands.manager, reason="wrong fix")
    attempt_revert_note(attempt=attempt, state="landing", batch=9)
    before = state_of(task)

    with lander_at_work(lands.project.pk), pytest.raises(Conflict) as refused:
        revert_cancel(task=task, actor=lands.manager, reason="oops")

    assert refused.value.code == "landing_in_progress"
    assert state_of(task) == before


def test_a_revert_whose_lander_died_mid_batch_is_settled_then_cancelled(lands):
    task, attempt = landed(lands)
    revert_request(task=task, actor=lands.manager, reason="wrong fix")
    dead = Batch.objects.create(
        project=lands.project,
        state=BatchState.VERIFYING,
        target="main",
        method="revert",
        changes=[{"attempt": attempt.pk, "task": task.key, "commit": LANDED}],
    )
    attempt_revert_note(attempt=attempt, state="landing", batch=dead.pk)

    revert_cancel(task=task, actor=lands.manager, reason="a false alarm")

    dead.refresh_from_db()
    attempt.refresh_from_db()
    assert dead.state == BatchState.ABANDONED
    assert (attempt.landing["revert"]["state"], attempt.revert_at) == ("cancelled", None)
    assert Task.objects.get(pk=task.pk).state == "done"


def test_a_cancelled_revert_can_be_asked_again(lands):
    task, attempt = landed(lands)
    revert_request(task=task, actor=lands.manager, reason="wrong fix")
    revert_cancel(task=task, actor=lands.manager, reason="a false alarm")

    revert_request(task=task, actor=lands.manager, reason="it was the fix after all")

    attempt.refresh_from_db()
    assert [a.pk for a in revert_queue(lands.project.pk)] == [attempt.pk]
    assert attempt.landing["revert"]["state"] == "queued"
    assert attempt.landing["revert"]["reason"] == "it was the fix after all"
    assert "cancelled" not in attempt.landing["revert"]


# --- The API, the page, the webhook -----------------------------------------------------------


def url(key):
    return f"/api/v1/tasks/{key}/revert/"


def test_a_manager_reverts_through_the_api(api, lands):
    task, attempt = landed(lands)

    answer = api(lands.manager).post(url(task.key), {"reason": "wrong fix"}, format="json")

    assert answer.status_code == 200
    assert (answer.json()["key"], answer.json()["state"]) == (task.key, "done")
    attempt.refresh_from_db()
    assert attempt.landing["revert"]["state"] == "queued"


def test_the_api_names_a_missing_reason(api, lands):
    task, _ = landed(lands)
    before = state_of(task)

    answer = api(lands.manager).post(url(task.key), {}, format="json")

    assert answer.status_code == 400
    assert (answer.json()["code"], list(answer.json()["fields"])) == ("invalid", ["reason"])
    assert answer.json()["detail"]
    assert state_of(task) == before


def test_a_reviewer_is_refused_and_another_projects_manager_finds_nothing(api, lands, other_flow):
    task, _ = landed(lands)
    before = state_of(task)

    refused = api(lands.reviewer).post(url(task.key), {"reason": "r"}, format="json")
    hidden = api(other_flow.manager).post(url(task.key), {"reason": "r"}, format="json")

    assert (refused.status_code, hidden.status_code) == (403, 404)
    assert state_of(task) == before


def test_the_api_says_a_revert_is_queued_already(api, lands):
    task, _ = landed(lands)
    api(lands.manager).post(url(task.key), {"reason": "first"}, format="json")

    answer = api(lands.manager).post(url(task.key), {"reason": "second"}, format="json")

    assert (answer.status_code, answer.json()["code"]) == (409, "revert_queued")


def test_a_manager_cancels_a_revert_through_the_api(api, lands):
    task, attempt = landed(lands)
    revert_request(task=task, actor=lands.manager, reason="wrong fix")

    answer = api(lands.manager).post(
        f"/api/v1/tasks/{task.key}/revert/cancel/", {"reason": "a false alarm"}, format="json"
    )

    assert answer.status_code == 200
    assert (answer.json()["key"], answer.json()["state"]) == (task.key, "done")
    attempt.refresh_from_db()
    assert (attempt.landing["revert"]["state"], attempt.revert_at) == ("cancelled", None)


def test_the_api_refuses_a_cancel_to_a_reviewer_and_hides_the_task_from_another_project(
    api, lands, other_flow
):
    task, _ = landed(lands)
    revert_request(task=task, actor=lands.manager, reason="wrong fix")
    before = state_of(task)
    cancel = f"/api/v1/tasks/{task.key}/revert/cancel/"

    refused = api(lands.reviewer).post(cancel, {"reason": "r"}, format="json")
    hidden = api(other_flow.manager).post(cancel, {"reason": "r"}, format="json")
    no_reason = api(lands.manager).post(cancel, {}, format="json")

    assert (refused.status_code, hidden.status_code, no_reason.status_code) == (403, 404, 400)
    assert list(no_reason.json()["fields"]) == ["reason"]
    assert state_of(task) == before


def test_subscribers_hear_a_landed_revert_with_both_commits(lands):
    task, attempt = landed(lands)
    revert_request(task=task, actor=lands.manager, reason="wrong fix")

    task_revert_land(attempt=attempt, commit="c" * 40, batch=7)

    event = Event.objects.get(task=task, transition="revert")
    assert type_of("tasks.task", event.transition, event.to_state) == "landing.reverted"
    body = envelope(event, task, "landing.reverted")
    assert body["data"]["reverted"] == {
        "reverts": LANDED,
        "commit": "c" * 40,
        "batch": 7,
        "by": lands.manager.get_username(),
        "reason": "wrong fix",
    }
    assert (body["data"]["to_state"], body["type"]) == ("ready", "landing.reverted")


def test_the_landing_picture_lists_the_queued_reverts_with_their_lane(api, lands):
    task, attempt = landed(lands)
    revert_request(task=task, actor=lands.manager, reason="wrong fix")
    landing_fast(task=task, actor=lands.manager, reason="the incident")
    attempt.refresh_from_db()

    body = api(lands.agent).get("/api/v1/projects/FM/landing/").json()

    assert body["reverts"] == [
        {
            "task": task.key,
            "title": "A change",
            "reverts": LANDED,
            "by": lands.manager.get_username(),
            "reason": "wrong fix",
            "asked_at": body["reverts"][0]["asked_at"],
            "state": "queued",
            "why": "",
            "lane": "fast",
        }
    ]
    assert body["queue"] == []
