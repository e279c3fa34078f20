"""A person closing the task's pull request on the host withdraws its live attempt: the
task is ready again, no attempt spent, the reason (who closed it, as the host says) in the
next attempt's context. Read from the host, never from the payload; a close read twice
withdraws once; only the first two withdrawals of a task are free, a third close fails
the attempt; deleting the branch closes it the same way; a retarget is put back; a
reopen withdraws nothing; an approved or done task, a merge, or the site's own close is
kept as it is."""

import pytest

from codehosts import sync
from codehosts.models import HostAccount, HostDelivery, TaskPullRequest
from projects.models import Event
from tasks import attempts, review
from tasks.models import Task
from tests.codehosts.test_deliveries import SECRET, deliver
from tests.codehosts.test_pull_requests import BRANCH, submitted
from tests.factories import all_met


@pytest.fixture
def in_review(hosted, repo, monkeypatch, django_capture_on_commit_callbacks):
    """WID-1 in review with max_attempts=1, its pull request #1 open on the host."""
    monkeypatch.setenv("FACTORY_HOST_WIDGETS_HOOK", SECRET)
    task, attempt, _ = submitted(hosted, repo, django_capture_on_commit_callbacks)
    Task.objects.filter(pk=task.pk).update(max_attempts=1)
    assert (task.state, repo.pulls[1].state) == ("in_review", "open")
    return task, attempt


def closed(client, github, capture, *, delivery="d-1", action="closed", number=1):
    """A delivery about pull request #``number`` processed; its result. The payload says
    it is open and merged: only the host's word counts."""
    with capture(execute=True):
        deliver(
            client,
            github,
            delivery=delivery,
            action=action,
            number=number,
            state="open",
            merged=True,
        )
    return HostDelivery.objects.get(delivery_id=delivery).result


def closed_twice(hosted, repo, github, client, capture, task):
    """Pull requests #1 and #2 closed by a person, each attempt withdrawn free; attempt 3
    in review with pull request #3 open."""
    for number in (1, 2):
        github.world.close_pull(repo, number, "ann")
        closed(client, github, capture, delivery=f"d-{number}", number=number)
        task, attempt, _ = submitted(hosted, repo, capture, task=task)
    assert (attempt.number, task.state, task.failed_attempts, withdrawals()) == (
        3,
        "in_review",
        0,
        2,
    )
    return task, attempt


def withdrawals() -> int:
    return Event.objects.filter(transition="withdraw", object_key="WID-1").count()


def test_a_person_closing_it_withdraws_the_attempt_without_spending_one(
    in_review, hosted, repo, github, client, django_capture_on_commit_callbacks
):
    task, attempt = in_review
    github.world.close_pull(repo, 1, "ann")

    result = closed(client, github, django_capture_on_commit_callbacks)

    reason = "pull request #1 closed on GitHub by @ann"
    assert result == f"WID-1: {reason}; attempt 1 withdrawn"
    task.refresh_from_db(), attempt.refresh_from_db()
    assert (task.state, task.failed_attempts, task.current_attempt_id) == ("ready", 0, None)
    assert (attempt.state, attempt.end_reason) == ("released", reason)
    assert withdrawals() == 1
    # Not opened again, by the delivery or the sweep; and max_attempts=1 is not spent.
    sync.hosts_reconcile()
    assert (list(repo.pulls), repo.pulls[1].state) == ([1], "closed")
    assert attempts.task_claim(agent=hosted.agent2, project=hosted.project).task_id == task.pk


def test_the_next_attempt_opens_a_new_pull_request(
    in_review, hosted, repo, github, client, django_capture_on_commit_callbacks
):
    task, _ = in_review
    github.world.close_pull(repo, 1, "ann")
    closed(client, github, django_capture_on_commit_callbacks)

    task, attempt, _ = submitted(hosted, repo, django_capture_on_commit_callbacks, task=task)

    assert (attempt.number, task.state) == (2, "in_review")
    assert (list(repo.pulls), repo.pulls[2].state, repo.pulls[2].head) == ([1, 2], "open", BRANCH)
    assert TaskPullRequest.objects.get(task=task).number == 2


def test_a_close_read_twice_withdraws_once_and_never_the_next_attempt(
    in_review, hosted, repo, github, client, django_capture_on_commit_callbacks
):
    task, _ = in_review
    github.world.close_pull(repo, 1, "ann")
    closed(client, github, django_capture_on_commit_callbacks, delivery="d-1")
    second = attempts.task_claim(agent=hosted.agent2, project=hosted.project)

    replayed = closed(client, github, django_capture_on_commit_callbacks, delivery="d-2")
    sync.hosts_reconcile()

    assert replayed == "WID-1: pull request #1 closed; acted on already"
    second.refresh_from_db(), task.refresh_from_db()
    assert (second.state, task.state, task.current_attempt_id) == ("running", "claimed", second.pk)
    assert withdrawals() == 1


def test_a_close_the_host_does_not_name_anyone_for_says_so_without_a_name(
    in_review, repo, github, client, django_capture_on_commit_callbacks
):
    _, attempt = in_review
    github.world.close_pull(repo, 1, "ann").closed_by = None

    result = closed(client, github, django_capture_on_commit_callbacks)

    attempt.refresh_from_db()
    assert result == "WID-1: pull request #1 closed on GitHub; attempt 1 withdrawn"
    assert attempt.end_reason == "pull request #1 closed on GitHub"


def test_deleting_the_branch_closes_it_and_withdraws_the_same_way(
    in_review, repo, github, client, django_capture_on_commit_callbacks
):
    task, attempt = in_review
    github.world.delete_branch(repo, BRANCH, "bob")

    result = closed(client, github, django_capture_on_commit_callbacks)

    task.refresh_from_db(), attempt.refresh_from_db()
    assert result == "WID-1: pull request #1 closed on GitHub by @bob; attempt 1 withdrawn"
    assert (task.state, task.failed_attempts, attempt.state) == ("ready", 0, "released")
    assert list(repo.pulls) == [1]


def test_a_retargeted_pull_request_is_put_back_on_the_target_and_nothing_is_withdrawn(
    in_review, repo, github, client, django_capture_on_commit_callbacks
):
    task, _ = in_review
    repo.git.commit("release", {"README.md": "release\n"}, "release", start="main")
    repo.pulls[1].base = "release"

    result = closed(client, github, django_capture_on_commit_callbacks, action="edited")

    task.refresh_from_db()
    assert result == "WID-1: pull request #1"
    assert (repo.pulls[1].base, repo.pulls[1].state, list(repo.pulls)) == ("main", "open", [1])
    assert (task.state, withdrawals()) == ("in_review", 0)


def test_a_reopened_pull_request_withdraws_nothing_and_the_next_attempt_updates_it(
    in_review, hosted, repo, github, client, django_capture_on_commit_callbacks
):
    task, _ = in_review
    github.world.close_pull(repo, 1, "ann")
    closed(client, github, django_capture_on_commit_callbacks, delivery="d-1")
    github.world.reopen_pull(repo, 1)

    result = closed(client, github, django_capture_on_commit_callbacks, delivery="d-2")
    task, attempt, _ = submitted(hosted, repo, django_capture_on_commit_callbacks, task=task)

    assert result == "WID-1: pull request #1 (draft)"
    assert (attempt.number, task.state, withdrawals()) == (2, "in_review", 1)
    assert (list(repo.pulls), repo.pulls[1].state) == ([1], "open")
    assert "Attempt WID-1#2" in repo.pulls[1].body


@pytest.mark.parametrize("lands", [False, True])
def test_a_close_after_approval_withdraws_nothing(
    in_review, hosted, repo, github, client, django_capture_on_commit_callbacks, lands
):
    task, attempt = in_review
    if lands:  # approved is queued to land: the lander's job is not run here
        hosted.project.repository_url = "https://git.example.org/fm.git"
        hosted.project.landing = {"mode": "push", "method": "squash", "batch_max": 4}
        hosted.project.save()
        task.project = hosted.project
    with django_capture_on_commit_callbacks(execute=not lands):
        review.task_approve(task=task, actor=hosted.reviewer, criteria=all_met(attempt))
    github.world.close_pull(repo, 1, "ann")
    before = list(Event.objects.values_list("pk", flat=True))

    result = closed(client, github, django_capture_on_commit_callbacks)

    task.refresh_from_db(), attempt.refresh_from_db()
    state = "approved" if lands else "done"
    assert result == f"WID-1: pull request #1 closed; the task is {state}, kept"
    assert (task.state, attempt.state, attempt.end_reason) == (state, "approved", "approved")
    assert list(Event.objects.values_list("pk", flat=True)) == before
    assert list(repo.pulls) == [1]


def test_a_merged_pull_request_withdraws_nothing(
    in_review, repo, github, client, django_capture_on_commit_callbacks
):
    task, _ = in_review
    repo.pulls[1].state, repo.pulls[1].merged = "closed", True

    result = closed(client, github, django_capture_on_commit_callbacks)

    task.refresh_from_db()
    assert result == "WID-1: pull request #1 merged; the task is in_review, kept"
    assert (task.state, withdrawals(), list(repo.pulls)) == ("in_review", 0, [1])


def test_a_close_in_the_sites_own_name_withdraws_nothing(
    in_review, repo, github, client, django_capture_on_commit_callbacks
):
    task, _ = in_review
    github.world.close_pull(repo, 1, repo.pulls[1].user)  # the App's own account

    result = closed(client, github, django_capture_on_commit_callbacks)

    task.refresh_from_db()
    assert result == "WID-1: pull request #1 closed by the site's own account"
    assert (task.state, withdrawals()) == ("in_review", 0)


def test_closing_an_earlier_pull_request_of_the_task_withdraws_nothing(
    in_review, hosted, repo, github, client, django_capture_on_commit_callbacks
):
    task, _ = in_review
    github.world.close_pull(repo, 1, "ann")
    closed(client, github, django_capture_on_commit_callbacks, delivery="d-1")
    task, attempt, _ = submitted(hosted, repo, django_capture_on_commit_callbacks, task=task)
    github.world.reopen_pull(repo, 1)
    github.world.close_pull(repo, 1, "ann")  # #1 closed again, after #2 was opened

    result = closed(client, github, django_capture_on_commit_callbacks, delivery="d-2")

    task.refresh_from_db(), attempt.refresh_from_db()
    assert result == "WID-1: pull request #1 is closed; it is not the task's now"
    assert (task.state, attempt.state, withdrawals()) == ("in_review", "passed", 1)


COUNTED = (
    "pull request #3 closed on GitHub by @ann; this task's pull requests were closed 3"
    " times, more than the 2 that are free, so this attempt counts as failed"
)


def test_the_third_close_of_a_tasks_pull_request_fails_the_attempt_and_spends_one(
    in_review, hosted, repo, github, client, django_capture_on_commit_callbacks
):
    task, _ = in_review
    Task.objects.filter(pk=task.pk).update(max_attempts=3)
    task, attempt = closed_twice(
        hosted, repo, github, client, django_capture_on_commit_callbacks, task
    )
    github.world.close_pull(repo, 3, "ann")

    result = closed(client, github, django_capture_on_commit_callbacks, delivery="d-3", number=3)

    reason = f"{COUNTED} (1 of 3 attempts used)"
    assert result == f"WID-1: {reason}; attempt 3 failed"
    task.refresh_from_db(), attempt.refresh_from_db()
    assert (task.state, task.failed_attempts, task.current_attempt_id) == ("ready", 1, None)
    assert (attempt.state, attempt.end_reason) == ("failed", reason)
    event = Event.objects.filter(transition="withdraw", object_key="WID-1").latest("pk")
    assert (event.from_state, event.to_state, event.extra) == (
        "in_review",
        "ready",
        {"attempt": 3, "counts": True},
    )
    assert withdrawals() == 3


def test_a_counted_close_with_max_attempts_reached_fails_the_task(
    in_review, hosted, repo, github, client, django_capture_on_commit_callbacks
):
    task, _ = in_review  # max_attempts=1
    task, attempt = closed_twice(
        hosted, repo, github, client, django_capture_on_commit_callbacks, task
    )
    github.world.close_pull(repo, 3, "ann")

    result = closed(client, github, django_capture_on_commit_callbacks, delivery="d-3", number=3)

    assert result == f"WID-1: {COUNTED} (1 of 1 attempts used); attempt 3 failed"
    task.refresh_from_db(), attempt.refresh_from_db()
    assert (task.state, task.failed_attempts, task.current_attempt_id) == ("failed", 1, None)
    assert attempt.state == "failed"
    assert attempts.task_claim(agent=hosted.agent2, project=hosted.project) is None


def test_a_counted_close_delivered_again_changes_nothing(
    in_review, hosted, repo, github, client, django_capture_on_commit_callbacks
):
    task, _ = in_review
    Task.objects.filter(pk=task.pk).update(max_attempts=3)
    task, attempt = closed_twice(
        hosted, repo, github, client, django_capture_on_commit_callbacks, task
    )
    github.world.close_pull(repo, 3, "ann")
    closed(client, github, django_capture_on_commit_callbacks, delivery="d-3", number=3)
    task.refresh_from_db(), attempt.refresh_from_db()
    before = (task.state, task.failed_attempts, attempt.state, Event.objects.count())

    replayed = closed(client, github, django_capture_on_commit_callbacks, delivery="d-4", number=3)
    sync.hosts_reconcile()

    assert replayed == "WID-1: pull request #3 closed; acted on already"
    task.refresh_from_db(), attempt.refresh_from_db()
    assert (task.state, task.failed_attempts, attempt.state, Event.objects.count()) == before
    assert before[:3] == ("ready", 1, "failed")
    assert withdrawals() == 3


def linked(hosted, github, login, user) -> int:
    """``login`` signs up on the host, and a manager links the account to ``user``."""
    number = github.world.person(login)
    HostAccount.objects.create(
        project=hosted.project, host_id=number, login=login, user=user, linked_by=hosted.manager
    )
    return number


def test_a_close_by_a_linked_member_names_them_here_and_withdraws_free(
    in_review, hosted, repo, github, client, django_capture_on_commit_callbacks
):
    task, attempt = in_review
    linked(hosted, github, "ann", hosted.reviewer)
    github.world.close_pull(repo, 1, "ann")

    result = closed(client, github, django_capture_on_commit_callbacks)

    reason = f"pull request #1 closed on GitHub by @ann ({hosted.reviewer.username} here)"
    assert result == f"WID-1: {reason}; attempt 1 withdrawn"
    task.refresh_from_db(), attempt.refresh_from_db()
    assert (task.state, task.failed_attempts) == ("ready", 0)
    assert (attempt.state, attempt.end_reason) == ("released", reason)


def test_a_close_by_the_attempts_own_agent_fails_the_attempt_at_once(
    in_review, hosted, repo, github, client, django_capture_on_commit_callbacks
):
    # An agent that closes its own pull request before the verdict spends the attempt, as
    # a rejection would: its first close is not one of the task's free withdrawals.
    task, attempt = in_review
    Task.objects.filter(pk=task.pk).update(max_attempts=3)
    linked(hosted, github, "agent-bot", hosted.agent)
    github.world.close_pull(repo, 1, "agent-bot")

    result = closed(client, github, django_capture_on_commit_callbacks)

    reason = (
        f"pull request #1 closed on GitHub by @agent-bot ({hosted.agent.username} here); the"
        " attempt's own agent closed it, so this attempt counts as failed (1 of 3 attempts used)"
    )
    assert result == f"WID-1: {reason}; attempt 1 failed"
    task.refresh_from_db(), attempt.refresh_from_db()
    assert (task.state, task.failed_attempts, task.current_attempt_id) == ("ready", 1, None)
    assert (attempt.state, attempt.end_reason) == ("failed", reason)
    event = Event.objects.filter(transition="withdraw", object_key="WID-1").latest("pk")
    assert event.extra == {"attempt": 1, "counts": True}
