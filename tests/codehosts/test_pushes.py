"""A person's push to a task's pull request is a new attempt in their name: the attempt it
replaces ends (released, or out of the landing queue keeping its approval), the push is
checked like any submission and reviewed against what was approved, never approved by its
pusher. Who pushed is read from the host's activity; a push read twice or out of order is
one attempt; a push by someone unknown here, or to a finished task, changes nothing on the
site and is said once on the pull request; an agent's own push under its lease is left to
its submission; while a batch lands the approved change the delivery waits."""

import pytest

from codehosts import sync
from codehosts.models import HostAccount, HostDelivery, TaskPullRequest
from codehosts.providers import provider_for
from codehosts.pulls import NEVER
from landing.lander import land
from landing.models import Batch
from projects.errors import PermissionDenied
from projects.models import Event
from tasks import attempts, review
from tasks.landing import approval_to_carry
from tasks.models import Attempt, Task
from tests.codehosts.test_deliveries import SECRET, deliver
from tests.codehosts.test_pull_requests import BRANCH, submitted
from tests.codehosts.through import approved
from tests.factories import all_met


def link(hosted, github, login, user):
    """``login`` has an account on the host, which a manager linked to ``user``."""
    HostAccount.objects.create(
        project=hosted.project,
        host_id=github.world.person(login),
        login=login,
        user=user,
        linked_by=hosted.manager,
    )


def pushed(client, github, capture, *, delivery="d-1") -> str:
    """GitHub's ``synchronize`` delivery about pull request #1 processed; its result."""
    with capture(execute=True):
        deliver(client, github, delivery=delivery, action="synchronize", state="open")
    found = HostDelivery.objects.get(delivery_id=delivery)
    return found.result or found.error


@pytest.fixture
def in_review(hosted, repo, github, monkeypatch, django_capture_on_commit_callbacks):
    """WID-1 in review (attempt 1 by the agent), its pull request #1 open; the reviewer's
    GitHub account is ``rev``, linked."""
    monkeypatch.setenv("FACTORY_HOST_WIDGETS_HOOK", SECRET)
    task, attempt, _ = submitted(hosted, repo, django_capture_on_commit_callbacks)
    link(hosted, github, "rev", hosted.reviewer)
    assert (task.state, repo.pulls[1].state) == ("in_review", "open")
    return task, attempt


@pytest.fixture
def queued(through, repo, github, monkeypatch, django_capture_on_commit_callbacks):
    """WID-1 approved and queued to land through its pull request #1 (``through``); ``ann``
    on GitHub is the member agent2, linked. ``(task, its approved attempt)``."""
    monkeypatch.setenv("FACTORY_HOST_WIDGETS_HOOK", SECRET)
    task, first, _ = approved(through, repo, django_capture_on_commit_callbacks)
    link(through, github, "ann", through.agent2)
    return task, first


def test_a_members_push_is_a_new_attempt_in_their_name(
    in_review, hosted, repo, github, client, django_capture_on_commit_callbacks
):
    task, first = in_review
    head = repo.git.commit(BRANCH, {"claim.py": "# fixed by a person\n"}, "fix", by="rev")

    result = pushed(client, github, django_capture_on_commit_callbacks)

    why = f"@rev (wid-reviewer here) pushed {head[:12]} to the task's pull request: attempt 2"
    assert result == f"WID-1: @rev (wid-reviewer here) pushed {head[:12]}: attempt 2"
    task.refresh_from_db(), first.refresh_from_db()
    second = task.current_attempt
    assert (second.number, second.agent, second.change) == (
        2,
        hosted.reviewer,
        {"commit": head, "branch": BRANCH},
    )
    # No gates in this project: checked at once, now waiting for a reviewer.
    assert (task.state, task.attempt_count, second.state) == ("in_review", 2, "passed")
    assert (first.state, first.end_reason) == ("released", f"superseded: {why}")
    assert task.failed_attempts == 0
    assert Event.objects.filter(transition="push", object_key="WID-1#2").get().reason == why
    assert "Attempt WID-1#2 by wid-reviewer" in repo.pulls[1].body


def test_the_task_page_and_the_api_show_the_persons_attempt(
    in_review, hosted, repo, github, client, api, django_capture_on_commit_callbacks
):
    head = repo.git.commit(BRANCH, {"claim.py": "# fixed by a person\n"}, "fix", by="rev")
    pushed(client, github, django_capture_on_commit_callbacks)

    client.force_login(hosted.manager)
    page = client.get("/tasks/WID-1/")
    task = api(hosted.manager).get("/api/v1/tasks/WID-1/").json()
    answer = api(hosted.manager).get(f"/api/v1/attempts/{task['current_attempt']}/")

    assert page.status_code == 200
    assert "Pushed to the pull request by @rev (wid-reviewer here)." in page.content.decode()
    assert answer.status_code == 200
    assert (answer.json()["number"], answer.json()["change"]) == (
        2,
        {"commit": head, "branch": BRANCH},
    )


def test_its_pusher_cannot_approve_it(
    in_review, hosted, repo, github, client, django_capture_on_commit_callbacks
):
    task, _ = in_review
    repo.git.commit(BRANCH, {"claim.py": "# the reviewer's own\n"}, "mine", by="rev")
    pushed(client, github, django_capture_on_commit_callbacks)
    task.refresh_from_db()
    second = task.current_attempt

    with pytest.raises(PermissionDenied):
        review.task_approve(task=task, actor=hosted.reviewer, criteria=all_met(second))

    task.refresh_from_db(), second.refresh_from_db()
    assert (task.state, second.state, second.reviewed_by) == ("in_review", "passed", None)


def test_a_push_read_twice_or_after_a_later_one_makes_one_attempt_each(
    in_review, hosted, repo, github, client, django_capture_on_commit_callbacks
):
    task, _ = in_review
    repo.git.commit(BRANCH, {"claim.py": "# one\n"}, "one", by="rev")
    pushed(client, github, django_capture_on_commit_callbacks, delivery="d-1")
    later = repo.git.commit(BRANCH, {"claim.py": "# two\n"}, "two", by="rev")

    # The first push's delivery again (a new id), then the second's twice: the host's
    # word is the head now, so each reads the second push.
    for delivery in ("d-1b", "d-2", "d-2b"):
        pushed(client, github, django_capture_on_commit_callbacks, delivery=delivery)
    sync.hosts_reconcile()

    task.refresh_from_db()
    numbers = list(Attempt.objects.filter(task=task).values_list("number", "state"))
    assert numbers == [(1, "released"), (2, "released"), (3, "passed")]
    assert task.current_attempt.change["commit"] == later
    assert Event.objects.filter(transition="push").count() == 2


def test_a_push_by_someone_unknown_here_changes_nothing_and_is_said_once(
    in_review, repo, github, client, django_capture_on_commit_callbacks
):
    task, first = in_review
    github.world.person("mallory")
    head = repo.git.commit(BRANCH, {"claim.py": "# not yours\n"}, "theirs", by="mallory")
    comments = len(repo.comments)

    result = pushed(client, github, django_capture_on_commit_callbacks, delivery="d-1")
    again = pushed(client, github, django_capture_on_commit_callbacks, delivery="d-2")

    why = (
        "@mallory is not a member of project WID on Factory Memory (a manager links a GitHub "
        "account to a member), so the push is not an attempt"
    )
    assert result.startswith(f"WID-1: the push of {head[:12]} was not taken: {why}")
    assert again.startswith(f"WID-1: the push of {head[:12]} was answered already: not taken")
    task.refresh_from_db(), first.refresh_from_db()
    assert (task.state, task.current_attempt_id, first.state) == ("in_review", first.pk, "passed")
    assert Attempt.objects.filter(task=task).count() == 1
    said = [c.body for c in repo.comments[comments:]]
    assert said == [
        f"Factory Memory did not take the push of {head[:12]} as an attempt of WID-1: {why}. "
        "The task's page on the site says where it stands."
    ]


def test_a_push_the_host_names_nobody_for_yet_is_read_again_at_the_next_delivery(
    in_review, hosted, repo, github, client, django_capture_on_commit_callbacks
):
    task, _ = in_review
    head = repo.git.commit(BRANCH, {"claim.py": "# by whom?\n"}, "anonymous")  # nobody named
    comments = len(repo.comments)

    result = pushed(client, github, django_capture_on_commit_callbacks, delivery="d-1")

    assert result.startswith(
        f"WID-1: the host's record of pushes names nobody for {head[:12]} yet; not taken"
    )
    assert (Attempt.objects.filter(task=task).count(), len(repo.comments)) == (1, comments)
    # The record catches up (here: a member pushes the same commit again).
    for sha in (f"{head}^", head):
        repo.git.git("update-ref", f"refs/heads/{BRANCH}", sha, by="rev")
    again = pushed(client, github, django_capture_on_commit_callbacks, delivery="d-2")
    assert again.startswith(f"WID-1: @rev (wid-reviewer here) pushed {head[:12]}: attempt 2")


def test_an_agents_push_under_its_lease_is_left_to_its_submission(
    in_review, hosted, repo, github, client, django_capture_on_commit_callbacks
):
    task, _first = in_review
    with django_capture_on_commit_callbacks(execute=True):  # the rejection shown there too
        review.task_reject(task=task, actor=hosted.reviewer, reason="not yet")
    second = attempts.task_claim(agent=hosted.agent, project=hosted.project)
    comments = len(repo.comments)
    head = repo.git.commit(BRANCH, {"claim.py": "# the agent's next\n"}, "next")

    result = pushed(client, github, django_capture_on_commit_callbacks)

    assert result.startswith(f"WID-1: someone pushed {head[:12]} while an agent holds it")
    task.refresh_from_db(), second.refresh_from_db()
    assert (task.state, task.current_attempt_id, second.state) == ("claimed", second.pk, "running")
    assert len(repo.comments) == comments


def test_another_members_push_while_an_agent_holds_it_is_said_and_not_taken(
    in_review, hosted, repo, github, client, django_capture_on_commit_callbacks
):
    task, _ = in_review
    with django_capture_on_commit_callbacks(execute=True):  # the rejection shown there too
        review.task_reject(task=task, actor=hosted.reviewer, reason="not yet")
    second = attempts.task_claim(agent=hosted.agent, project=hosted.project)
    head = repo.git.commit(BRANCH, {"claim.py": "# meanwhile\n"}, "meanwhile", by="rev")

    result = pushed(client, github, django_capture_on_commit_callbacks)

    assert result.startswith(
        f"WID-1: the push of {head[:12]} was not taken: WID-1#2 by wid-agent holds WID-1 "
        "under a lease; its next submission is the task's attempt: the push is not an attempt"
    )
    task.refresh_from_db()
    assert (task.state, task.current_attempt_id) == ("claimed", second.pk)
    assert "holds WID-1 under a lease" in repo.comments[-1].body


def test_a_push_to_a_done_tasks_pull_request_is_not_taken(
    in_review, hosted, repo, github, client, django_capture_on_commit_callbacks
):
    task, first = in_review
    review.task_approve(task=task, actor=hosted.reviewer, criteria=all_met(first))
    task.refresh_from_db()
    assert task.state == "done"  # landing off: approved is done
    repo.git.commit(BRANCH, {"claim.py": "# after the fact\n"}, "late", by="rev")

    result = pushed(client, github, django_capture_on_commit_callbacks)

    assert "was not taken: WID-1 is done: the push is not an attempt" in result
    task.refresh_from_db()
    assert (task.state, task.current_attempt_id, task.attempt_count) == ("done", first.pk, 1)


def test_after_approval_the_push_leaves_the_queue_and_is_reviewed_against_the_approval(
    queued, through, repo, github, client, django_capture_on_commit_callbacks
):
    task, first = queued
    head = repo.git.commit(BRANCH, {"alpha.py": "ALPHA = 2\n"}, "ann's change", by="ann")

    pushed(client, github, django_capture_on_commit_callbacks)

    task.refresh_from_db(), first.refresh_from_db()
    second = task.current_attempt
    assert (task.state, second.number, second.agent, second.state) == (
        "in_review",
        2,
        through.agent2,
        "passed",
    )
    # The approval stays the first attempt's; it left the queue, saying why.
    assert (first.state, first.landing["state"], first.queued_at) == ("approved", "dequeued", None)
    assert first.landing["reason"] == (
        f"@ann (wid-agent2 here) pushed {head[:12]} to the task's pull request: attempt 2"
    )
    carry = approval_to_carry(second)
    assert (carry.earlier, carry.carries) == (first, False)


def test_the_persons_attempt_once_approved_lands_through_the_pull_request(
    queued, through, repo, github, client, django_capture_on_commit_callbacks
):
    task, _ = queued
    repo.git.commit(BRANCH, {"alpha.py": "ALPHA = 2\n"}, "ann's change", by="ann")
    pushed(client, github, django_capture_on_commit_callbacks)
    task.refresh_from_db()

    with django_capture_on_commit_callbacks(execute=True):  # the approval's lander runs
        review.task_approve(
            task=task, actor=through.reviewer, criteria=all_met(task.current_attempt)
        )

    task.refresh_from_db()
    merged = repo.git.head("main")
    assert (task.state, task.landed_commit) == ("done", merged)
    assert repo.git.git("show", f"{merged}:alpha.py") == "ALPHA = 2"
    assert (repo.pulls[1].merged, list(repo.pulls)) == (True, [1])


def test_while_a_batch_lands_the_approved_change_the_push_waits(
    queued, through, repo, github, client, django_capture_on_commit_callbacks
):
    task, first = queued
    Attempt.objects.filter(pk=first.pk).update(landing={**first.landing, "state": "landing"})
    repo.git.commit(BRANCH, {"alpha.py": "ALPHA = 3\n"}, "meanwhile", by="ann")

    result = pushed(client, github, django_capture_on_commit_callbacks)

    delivery = HostDelivery.objects.get(delivery_id="d-1")
    assert delivery.processed_at is None
    assert result == (
        "WID-1's approved change is being landed now; the push is read again once it ends"
    )
    task.refresh_from_db()
    assert (task.state, task.current_attempt_id, task.attempt_count) == ("approved", first.pk, 1)


def test_a_head_the_lander_put_on_the_branch_is_the_sites_own(
    queued, through, repo, github, client, django_capture_on_commit_callbacks
):
    task, first = queued
    head = repo.git.commit(BRANCH, {"alpha.py": "ALPHA = 4\n"}, "built", by="ann")
    pull = {"number": 1, "branch": BRANCH, "heads": [head]}
    Attempt.objects.filter(pk=first.pk).update(landing={**first.landing, "pull": pull})

    pushed(client, github, django_capture_on_commit_callbacks)

    task.refresh_from_db()
    assert (task.state, task.current_attempt_id, task.attempt_count) == ("approved", first.pk, 1)


def test_the_provider_reads_who_pushed_a_head_from_the_repositorys_activity(hosted, repo, github):
    ann = github.world.person("ann")
    first = repo.git.commit("topic", {"a.py": "a\n"}, "a", start="main", by="ann")
    second = repo.git.commit("topic", {"a.py": "b\n"}, "b")
    host = provider_for(hosted.project)

    found = host.pushed_by("topic", first)

    assert (found.id, found.login) == (ann, "ann")
    assert host.pushed_by("topic", second) is None  # the activity names nobody
    assert host.pushed_by("topic", "f" * 40) is None
    assert Task.objects.count() == 0  # asked, nothing written


def test_the_lander_finding_the_head_moved_takes_the_push_before_an_agent_can_claim(
    queued, through, repo, github, django_capture_on_commit_callbacks
):
    task, first = queued
    head = repo.git.commit(BRANCH, {"alpha.py": "ALPHA = 5\n"}, "no delivery", by="ann")

    with django_capture_on_commit_callbacks(execute=True):
        land(through.project)  # the delivery of the push was lost, or is late

    task.refresh_from_db(), first.refresh_from_db()
    second = task.current_attempt
    assert (task.state, second.agent, second.change["commit"]) == (
        "in_review",
        through.agent2,
        head,
    )
    assert first.landing["state"] == "dequeued"
    # The batch sent the change back, saying whose attempt the push is now.
    assert Batch.objects.get().reason.endswith(
        f"(someone pushed to it after the approval): WID-1: @ann (wid-agent2 here) pushed "
        f"{head[:12]}: attempt 2"
    )
    assert attempts.task_claim(agent=through.agent, project=through.project) is None


def test_a_push_whose_delivery_was_lost_is_taken_at_the_next_sync(
    in_review, hosted, repo, github, django_capture_on_commit_callbacks
):
    task, _ = in_review
    head = repo.git.commit(BRANCH, {"claim.py": "# no delivery\n"}, "fix", by="rev")
    TaskPullRequest.objects.update(synced_at=NEVER)  # as after the task changed

    with django_capture_on_commit_callbacks(execute=True):
        sync.hosts_reconcile()

    task.refresh_from_db()
    assert (task.current_attempt.number, task.current_attempt.change["commit"]) == (2, head)
