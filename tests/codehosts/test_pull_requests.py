"""A pull request per task, against the stand-in: a submission opens it (draft, the handoff
as its body), the gates' verdicts are check runs on the commit, the gates passing make it
ready, the reviewer's verdict is the required check ``factory-memory/review`` and a
comment. Every host call is made by a job after the change committed; a host that fails
loses nothing, and the sweep makes the host agree afterwards."""

import pytest

from codehosts import jobs, pulls, sync
from codehosts.models import TaskPullRequest
from codehosts.providers import HostError
from codehosts.providers.github import GitHubHost
from projects.models import Event
from tasks import attempts, review
from tasks.models import Attempt, Task
from tests.codehosts.conftest import NOTHING_MORE
from tests.factories import Flow, ProjectFactory, all_met

BRANCH = "fm/WID-1"
FAILING_JUNIT = (
    b"<testsuite tests='2'>"
    b"<testcase classname='tests.test_claim' name='test_claim'/>"
    b"<testcase classname='tests.test_claim' name='test_exclusive'>"
    b"<failure message='assert 2 == 1'>two agents held WID-1</failure></testcase>"
    b"</testsuite>"
)
PASSING_JUNIT = (
    b"<testsuite tests='1'><testcase classname='tests.test_claim' name='test_claim'/></testsuite>"
)


def submitted(
    hosted,
    repo,
    capture,
    *,
    junit=None,
    task=None,
    summary="Claims are exclusive.",
    run=True,
    branch=BRANCH,
):
    """The agent's branch pushed, the attempt submitted with it, the jobs run on commit
    (unless not ``run``)."""
    if task is None:
        task, attempt = hosted.claimed(spec=hosted.spec(), title="Exclusive claims")
    else:
        attempt = attempts.task_claim(agent=hosted.agent, project=hosted.project)
    sha = repo.git.commit(branch, {"claim.py": f"# {attempt.number}\n"}, "claim", start="main")
    if junit is not None:
        hosted.attach(attempt, junit, kind="junit", name="junit.xml", criteria=["AC-1"])
    with capture(execute=run):
        attempt = attempts.attempt_submit(
            attempt=attempt,
            actor=hosted.agent,
            summary=summary,
            change={"commit": sha, "branch": branch},
        )
    task.refresh_from_db()
    attempt.refresh_from_db()
    return task, attempt, sha


def checks(repo) -> list[tuple[str, str, str | None]]:
    return [(c.name, c.head_sha, c.conclusion) for c in repo.checks.values()]


def test_a_submission_opens_a_draft_pull_request_with_the_handoff(
    hosted, repo, django_capture_on_commit_callbacks
):
    hosted.gates({"tests-pass": {}})
    task, _attempt, sha = submitted(hosted, repo, django_capture_on_commit_callbacks, run=False)

    jobs.pull_request_sync_job.delay(task.pk)  # the gate's job has not run yet

    pull = repo.pulls[1]
    assert list(repo.pulls) == [1]
    assert (pull.title, pull.head, pull.base, pull.draft) == (
        "WID-1: Exclusive claims",
        BRANCH,
        "main",
        True,
    )
    assert pull.body.startswith("Factory Memory task [WID-1](http://127.0.0.1:8000/tasks/WID-1/)")
    assert (
        "## What changed\n\nAttempt WID-1#1 by wid-agent (checking):\n> Claims are exclusive."
        in (pull.body)
    )
    assert "- [ ] AC-1: Claims are exclusive. (evidence: none yet)" in pull.body
    assert pull.body.endswith("<!-- factory-memory:task WID-1 -->")
    link = TaskPullRequest.objects.get(task=task)
    assert (link.number, link.url, link.draft, link.head_sha) == (1, pull_url(repo), True, sha)


def pull_url(repo, number=1):
    return f"https://standin.invalid/{repo.full_name}/pull/{number}"


def test_the_task_page_links_its_pull_request(
    hosted, repo, client, django_capture_on_commit_callbacks
):
    task, _, _ = submitted(hosted, repo, django_capture_on_commit_callbacks)
    client.force_login(hosted.reviewer)

    page = client.get(f"/tasks/{task.key}/").content.decode()

    assert f'<a href="{pull_url(repo)}">pull request #1</a>' in page


def test_gates_passing_make_it_ready_and_their_verdicts_check_runs(
    hosted, repo, django_capture_on_commit_callbacks
):
    hosted.gates({"tests-pass": {}})

    task, _attempt, sha = submitted(
        hosted, repo, django_capture_on_commit_callbacks, junit=PASSING_JUNIT
    )

    assert task.state == "in_review"
    assert repo.pulls[1].draft is False
    assert checks(repo) == [("factory-memory/tests-pass", sha, "success")]
    assert TaskPullRequest.objects.get(task=task).posted == {
        "1": {"checks": {"tests-pass": {"id": next(iter(repo.checks)), "state": "passed"}}}
    }


def test_a_failing_gate_is_a_failed_check_run_annotated_at_the_test(
    hosted, repo, django_capture_on_commit_callbacks
):
    hosted.gates({"tests-pass": {}})

    task, _attempt, _sha = submitted(
        hosted, repo, django_capture_on_commit_callbacks, junit=FAILING_JUNIT
    )

    check = next(iter(repo.checks.values()))
    assert (task.state, repo.pulls[1].draft) == ("ready", True)
    assert (check.name, check.conclusion) == ("factory-memory/tests-pass", "failure")
    assert [(a["path"], a["start_line"], a["message"]) for a in check.annotations] == [
        ("tests/test_claim.py", 1, "assert 2 == 1")
    ]
    assert "failed gate tests-pass" in repo.pulls[1].body


def approved(hosted, task, capture):
    with capture(execute=True):
        attempt = task.current_attempt
        review.task_approve(task=task, actor=hosted.reviewer, criteria=all_met(attempt))


def test_an_approval_is_the_required_review_check_and_a_comment(
    hosted, repo, django_capture_on_commit_callbacks
):
    task, _attempt, sha = submitted(hosted, repo, django_capture_on_commit_callbacks)

    approved(hosted, task, django_capture_on_commit_callbacks)

    assert checks(repo) == [("factory-memory/review", sha, "success")]
    assert [c.body.splitlines()[0] for c in repo.comments] == [
        "wid-reviewer approved WID-1#1 on Factory Memory."
    ]
    assert repo.pulls[1].draft is False


def test_a_rejection_fails_the_review_check_and_drafts_the_pull_request_again(
    hosted, repo, django_capture_on_commit_callbacks
):
    task, _attempt, sha = submitted(hosted, repo, django_capture_on_commit_callbacks)

    with django_capture_on_commit_callbacks(execute=True):
        review.task_reject(task=task, actor=hosted.reviewer, reason="AC-2: no screenshot")

    assert checks(repo) == [("factory-memory/review", sha, "failure")]
    assert [c.body for c in repo.comments] == [
        "wid-reviewer rejected WID-1#1 on Factory Memory.\n\n> AC-2: no screenshot"
    ]
    assert repo.pulls[1].draft is True
    assert "WID-1#1 was rejected: AC-2: no screenshot" in repo.pulls[1].body


def test_a_second_attempt_updates_the_same_pull_request(
    hosted, repo, django_capture_on_commit_callbacks
):
    task, _, _ = submitted(hosted, repo, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        review.task_reject(task=task, actor=hosted.reviewer, reason="try again")

    task, _second, sha = submitted(
        hosted, repo, django_capture_on_commit_callbacks, task=task, summary="Second go."
    )

    assert list(repo.pulls) == [1]
    assert repo.pulls[1].head == BRANCH
    assert "Attempt WID-1#2 by wid-agent" in repo.pulls[1].body
    assert TaskPullRequest.objects.get(task=task).head_sha == sha


def test_an_attempt_from_another_branch_opens_a_new_pull_request_and_closes_the_old(
    hosted, repo, django_capture_on_commit_callbacks
):
    task, _, _ = submitted(hosted, repo, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        review.task_reject(task=task, actor=hosted.reviewer, reason="try again")

    task, second, _ = submitted(
        hosted, repo, django_capture_on_commit_callbacks, task=task, branch="fm/WID-1-again"
    )

    assert sorted(repo.pulls) == [1, 2]
    assert (repo.pulls[1].state, repo.pulls[2].state) == ("closed", "open")
    assert repo.pulls[1].closed_by == "factory-memory[bot]"
    assert repo.comments[-1].issue == 1
    assert repo.comments[-1].body.startswith(
        "Superseded by #2: WID-1's attempt 2 is proposed there"
    )
    assert TaskPullRequest.objects.get(task=task).number == 2
    second.refresh_from_db()
    assert (second.state, task.state) == ("passed", "in_review")  # nothing withdrawn


def test_a_sync_a_newer_attempt_overtook_closes_the_pull_request_it_opened(
    hosted, repo, monkeypatch, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    task, _, _ = submitted(hosted, repo, capture)
    with capture(execute=True):
        review.task_reject(task=task, actor=hosted.reviewer, reason="try again")
    real = GitHubHost.open_or_update_pull_request
    overtaken = []

    def slow(host, **asked):  # a sync of attempt 1, overtaken by attempt 2's on its way
        if asked["head"] == BRANCH and not overtaken:
            overtaken.append(
                submitted(hosted, repo, capture, task=task, branch="fm/WID-1-again")[1]
            )
        return real(host, **asked)

    monkeypatch.setattr(GitHubHost, "open_or_update_pull_request", slow)

    said = pulls.pull_request_sync(task_id=task.pk)

    assert said == "WID-1: attempt 1 was overtaken: WID-1's attempt 2 was submitted"
    assert {n: p.state for n, p in repo.pulls.items()} == {1: "closed", 2: "open", 3: "closed"}
    assert repo.pulls[3].head == BRANCH  # opened for attempt 1 in the race, and closed
    assert repo.comments[-1].body.startswith("Superseded: WID-1's attempt 2 was submitted while")
    assert TaskPullRequest.objects.get(task=task).number == 2


def test_a_sync_overtaken_by_the_landing_of_its_change_closes_the_pull_request_it_opened(
    hosted, repo, github, monkeypatch, django_capture_on_commit_callbacks
):
    task, attempt, _ = submitted(hosted, repo, django_capture_on_commit_callbacks)
    real = GitHubHost.open_or_update_pull_request

    def slow(host, **asked):  # meanwhile the lander merges #1 and records the landing
        if not repo.pulls[1].merged:
            repo.pulls[1].state, repo.pulls[1].merged = "closed", True
            Attempt.objects.filter(pk=attempt.pk).update(
                landing={"state": "landed", "pull": {"number": 1}}
            )
        return real(host, **asked)

    monkeypatch.setattr(GitHubHost, "open_or_update_pull_request", slow)

    said = pulls.pull_request_sync(task_id=task.pk)

    assert said == "WID-1: attempt 1 was overtaken: WID-1's change landed"
    assert {n: (p.state, p.merged) for n, p in repo.pulls.items()} == {
        1: ("closed", True),
        2: ("closed", False),  # opened from the merged branch in the race, and closed
    }
    assert TaskPullRequest.objects.get(task=task).number == 1


def test_a_pull_request_the_race_opened_whose_close_failed_is_closed_at_the_next_sync(
    hosted, repo, github, monkeypatch, django_capture_on_commit_callbacks
):
    task, attempt, _ = submitted(hosted, repo, django_capture_on_commit_callbacks)
    real = GitHubHost.open_or_update_pull_request

    def slow(host, **asked):  # meanwhile the lander merges #1 and records the landing
        if not repo.pulls[1].merged:
            repo.pulls[1].state, repo.pulls[1].merged = "closed", True
            Attempt.objects.filter(pk=attempt.pk).update(
                landing={"state": "landed", "pull": {"number": 1}}
            )
        return real(host, **asked)

    monkeypatch.setattr(GitHubHost, "open_or_update_pull_request", slow)
    github.fail("502", count=1, match="POST /repos/octo-org/widgets/issues/2/comments")
    with pytest.raises(HostError):
        pulls.pull_request_sync(task_id=task.pk)  # the close of #2 failed: 502
    assert repo.pulls[2].state == "open"

    said = pulls.pull_request_sync(task_id=task.pk)  # the job's next try, or the sweep's

    assert said == "WID-1: pull request #1 merged by the landing"
    assert {n: p.state for n, p in repo.pulls.items()} == {1: "closed", 2: "closed"}
    assert repo.comments[-1].body == (
        "Superseded: WID-1's change landed through #1. Closed by Factory Memory."
    )


def test_running_the_job_again_posts_nothing_twice(
    hosted, repo, django_capture_on_commit_callbacks
):
    task, _, _ = submitted(hosted, repo, django_capture_on_commit_callbacks)
    approved(hosted, task, django_capture_on_commit_callbacks)

    jobs.pull_request_sync_job.delay(task.pk)
    jobs.pull_request_sync_job.delay(task.pk)

    assert (len(repo.pulls), len(repo.checks), len(repo.comments)) == (1, 1, 1)


def test_a_project_without_a_code_host_calls_no_host_and_queues_no_job(
    github, db, django_capture_on_commit_callbacks
):
    hosted = Flow(ProjectFactory(slug="NON"))
    hosted.gates({})
    _task, attempt = hosted.claimed()

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        attempts.attempt_submit(
            attempt=attempt,
            actor=hosted.agent,
            summary="s",
            change={"commit": "a" * 40, "branch": "b"},
        )

    assert [c for c in callbacks if "sync_on_event" in c.__qualname__] == []
    assert github.calls() == []
    assert not TaskPullRequest.objects.exists()


def test_an_attempt_without_a_branch_opens_nothing(
    hosted, repo, django_capture_on_commit_callbacks
):
    _task, attempt = hosted.claimed()

    with django_capture_on_commit_callbacks(execute=True):
        attempts.attempt_submit(
            attempt=attempt, actor=hosted.agent, summary="s", change={"commit": "a" * 40}
        )

    assert repo.pulls == {}
    assert not TaskPullRequest.objects.exists()


@pytest.mark.parametrize("fault", ["502", "429", "timeout"])
def test_a_failing_host_loses_nothing_and_the_job_retries(
    hosted, repo, github, fault, django_capture_on_commit_callbacks
):
    # The pull request's creation answered badly once: writes are not re-sent by the
    # provider, so the job's own retry (after re-reading) opens it.
    github.fail(fault, match="POST /repos/octo-org/widgets/pulls")

    task, attempt, _ = submitted(hosted, repo, django_capture_on_commit_callbacks)

    assert (task.state, attempt.state) == ("in_review", "passed")
    assert list(repo.pulls) == [1]
    assert repo.pulls[1].body.endswith("<!-- factory-memory:task WID-1 -->")
    assert TaskPullRequest.objects.get(task=task).number == 1


def test_a_host_down_through_every_retry_is_repaired_by_the_sweep(
    hosted, repo, github, settings, django_capture_on_commit_callbacks
):
    settings.FACTORY_CODE_HOST_RETRIES = 0
    github.fail("502", count=100, match="/pulls")
    task, attempt, _ = submitted(hosted, repo, django_capture_on_commit_callbacks)
    approved(hosted, task, django_capture_on_commit_callbacks)
    assert (repo.pulls, repo.checks, repo.comments) == ({}, {}, [])
    assert Task.objects.get(pk=task.pk).state == "done"
    github.faults.clear()

    counts = sync.hosts_reconcile()

    assert counts == {
        "pull_requests_synced": 1,
        "pull_requests_failed": 0,
        "deliveries_retried": 0,
        **NOTHING_MORE,
    }
    assert (repo.pulls[1].draft, checks(repo), len(repo.comments)) == (
        False,
        [("factory-memory/review", attempt.change["commit"], "success")],
        1,
    )
    assert sync.hosts_reconcile()["pull_requests_synced"] == 0


def test_the_sweep_is_bounded_per_tick(
    hosted, repo, github, settings, django_capture_on_commit_callbacks
):
    github.fail("502", count=100, match="/pulls")
    settings.FACTORY_CODE_HOST_RETRIES = 0
    settings.FACTORY_CODE_HOST_JOB_RETRIES = 0
    submitted(hosted, repo, django_capture_on_commit_callbacks)
    github.faults.clear()

    assert sync.hosts_reconcile(limit=0)["pull_requests_synced"] == 0
    assert repo.pulls == {}
    assert sync.hosts_reconcile(limit=1)["pull_requests_synced"] == 1


def test_the_events_of_a_submission_are_unchanged_by_a_host_that_fails(
    hosted, repo, github, django_capture_on_commit_callbacks
):
    github.fail("502", count=100)

    task, attempt, _ = submitted(hosted, repo, django_capture_on_commit_callbacks)

    assert (task.state, attempt.state) == ("in_review", "passed")
    assert repo.pulls == {}
    assert list(Event.objects.filter(task=task).values_list("transition", flat=True)) == [
        "create",
        "publish",
        "start",
        "claim",
        "submit",
        "submit",
        "gates_passed",
        "gates_passed",
    ]


@pytest.mark.parametrize(
    "fault,call",
    [
        ("502", "POST /repos/octo-org/widgets/check-runs"),
        ("429", "POST /repos/octo-org/widgets/check-runs"),
        ("502", "POST /repos/octo-org/widgets/issues/1/comments"),
        ("timeout", "POST /repos/octo-org/widgets/issues/1/comments"),
        ("429", "GET /repos/octo-org/widgets/pulls"),
    ],
)
def test_a_host_failing_at_the_review_loses_nothing_and_posts_once(
    hosted, repo, github, fault, call, django_capture_on_commit_callbacks
):
    task, _attempt, sha = submitted(hosted, repo, django_capture_on_commit_callbacks)
    github.fail(fault, match=call)

    approved(hosted, task, django_capture_on_commit_callbacks)

    task.refresh_from_db()
    assert task.state == "done"
    assert checks(repo) == [("factory-memory/review", sha, "success")]
    assert len(repo.comments) == 1
    assert sync.hosts_reconcile()["pull_requests_synced"] == 0


def test_a_body_past_githubs_limit_is_cut_and_keeps_the_tasks_marker(
    hosted, repo, django_capture_on_commit_callbacks
):
    _task, attempt = hosted.claimed(title="Long", description="word " * 20_000)
    sha = repo.git.commit(BRANCH, {"a.py": "a\n"}, "a", start="main")

    with django_capture_on_commit_callbacks(execute=True):
        attempts.attempt_submit(
            attempt=attempt,
            actor=hosted.agent,
            summary="s",
            change={"commit": sha, "branch": BRANCH},
        )

    body = repo.pulls[1].body
    assert len(body) <= 65_536
    assert body.endswith("<!-- factory-memory:task WID-1 -->")


def test_a_claim_queues_no_host_job_even_where_there_is_a_host(
    hosted, repo, github, django_capture_on_commit_callbacks
):
    task = hosted.ready(title="Not yet submitted")

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        attempts.task_claim(agent=hosted.agent, project=hosted.project)

    assert [c for c in callbacks if "sync_on_event" in c.__qualname__] == []
    assert github.calls() == []
    assert not TaskPullRequest.objects.filter(task=task).exists()


def test_an_approval_costs_four_host_calls(
    hosted, repo, github, django_capture_on_commit_callbacks
):
    task, _, _ = submitted(hosted, repo, django_capture_on_commit_callbacks)
    before = len(github.calls())

    approved(hosted, task, django_capture_on_commit_callbacks)

    assert github.calls()[before:] == [
        "GET /repos/octo-org/widgets/pulls 200",
        "PATCH /repos/octo-org/widgets/pulls/1 200",
        "POST /repos/octo-org/widgets/check-runs 201",
        "POST /repos/octo-org/widgets/issues/1/comments 201",
    ]
