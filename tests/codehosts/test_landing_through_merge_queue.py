"""Landing through GitHub's own merge queue (``landing.mode: pull_request`` on a target
that has one; docs/code-hosts.md, "Through GitHub's merge queue"), against the stand-in:
its ``main`` takes changes only through the queue, which builds a merge group per queued
pull request (``gh-readonly-queue/main/pr-N-<head>``) and merges it once ``ci`` and
``factory-memory/review`` are green on the group's head. The lander checks each group is
its base plus the approved change, verifies it, and vouches for it there."""

import pytest

from codehosts import pulls
from landing import through_host
from landing.lander import land
from landing.models import Batch, BatchState
from projects.models import Event
from tests.codehosts.through import BRANCH, approved, state, verified_by_the_runner
from tests.github_standin.world import Protection, Pull
from tests.landing.conftest import broken, feature

QUEUED = Protection(required_checks=["ci", "factory-memory/review"], merge_queue=True)


@pytest.fixture
def target_protection():
    return QUEUED


@pytest.fixture
def checks_timeout():
    """Room for a merge group's round (reads, a fetch, the checks posted) on a loaded
    machine; the default 0.3 s is for a wait that is meant to run out."""
    return 15


def test_a_change_lands_through_githubs_merge_queue(
    through, repo, django_capture_on_commit_callbacks
):
    task, _, sha = approved(through, repo, django_capture_on_commit_callbacks)
    base = repo.git.head("main")

    counts = land(through.project)

    merged = repo.git.head("main")
    pull = repo.pulls[1]
    assert counts["landed"] == 1
    assert (pull.state, pull.merged, pull.merge_commit_sha) == ("closed", True, merged)
    assert repo.git.git("rev-list", "--parents", "-n", "1", merged).split()[1:] == [base, sha]
    assert repo.git.head(BRANCH) == sha  # the branch untouched: the queue built the group
    on_group = sorted((c.name, c.conclusion) for c in repo.checks.values() if c.head_sha == merged)
    assert on_group == [("factory-memory/review", "success"), ("factory-memory/runner", "success")]
    assert [name for name in repo.git.git("for-each-ref", "--format=%(refname)").split()] == [
        "refs/heads/fm/WID-1",
        "refs/heads/main",
    ]  # the group's branch is gone once it merged
    task.refresh_from_db()
    assert (task.state, task.landed_commit) == ("done", merged)
    batch = Batch.objects.get()
    assert (batch.state, batch.reason) == (
        BatchState.LANDED,
        f"merged as {merged} through the pull request, tree {batch.tree}",
    )


def test_after_landing_the_sites_sync_proposes_the_merged_branch_no_more(
    through, repo, django_capture_on_commit_callbacks
):
    task, _, _ = approved(through, repo, django_capture_on_commit_callbacks)
    land(through.project)

    said = pulls.pull_request_sync(task_id=task.pk)

    assert said == "WID-1: pull request #1 merged by the landing"
    assert sorted(repo.pulls) == [1]


def test_a_merge_group_whose_required_check_fails_comes_back_naming_it(
    through, repo, team_ci, django_capture_on_commit_callbacks
):
    task, _, _ = approved(through, repo, django_capture_on_commit_callbacks)
    base = repo.git.head("main")
    posted = []

    def fail_on_the_group():  # green on the pull request's head, red on its merge group
        team_ci.conclusion = "failure"
        posted.append(True)

    team_ci.then = fail_on_the_group

    land(through.project)

    assert posted and repo.git.head("main") == base
    assert (repo.pulls[1].merged, repo.pulls[1].queued) == (False, False)
    task_state, landing, reason = state(task)
    assert (task_state, landing) == ("ready", "failed")
    assert reason.startswith(
        "landing failed: main's merge queue on the host let pull request #1 go without "
        "merging it: the required check ci (failure) of main did not pass on its merge group"
    )
    assert Batch.objects.get().state == BatchState.RETURNED


def test_a_merge_group_holding_bytes_nobody_approved_is_refused_and_taken_out(
    through, repo, monkeypatch, django_capture_on_commit_callbacks
):
    task, _, _ = approved(through, repo, django_capture_on_commit_callbacks)
    base = repo.git.head("main")
    real = repo.git.merge_tree

    def smuggling(base, head):  # a host whose merge group holds one file more
        listing = repo.git.git("ls-tree", real(base, head))
        blob = repo.git.git("hash-object", "-w", "--stdin", stdin=b"smuggled\n")
        return repo.git.git("mktree", stdin=f"{listing}\n100644 blob {blob}\tSMUGGLED\n".encode())

    monkeypatch.setattr(repo.git, "merge_tree", smuggling)

    land(through.project)

    assert repo.git.head("main") == base
    assert (repo.pulls[1].merged, repo.pulls[1].queued) == (False, False)
    refused = [c for c in repo.checks.values() if c.conclusion == "failure"]
    assert sorted(c.name for c in refused) == ["factory-memory/review", "factory-memory/runner"]
    task_state, landing, reason = state(task)
    assert (task_state, landing) == ("ready", "failed")
    assert "holds bytes no reviewer approved" in reason


def test_a_push_to_the_branch_while_queued_takes_it_out_and_the_change_goes_back(
    through, repo, team_ci, django_capture_on_commit_callbacks
):
    task, _, _ = approved(through, repo, django_capture_on_commit_callbacks)
    base = repo.git.head("main")
    pushed = []

    def a_persons_push():  # once the site vouched for the merge group
        if repo.pulls[1].queued and not pushed:
            pushed.append(repo.git.commit(BRANCH, {"alpha.py": "theirs\n"}, "a person's fix"))
        team_ci.then = a_persons_push

    team_ci.then = a_persons_push

    land(through.project)

    assert pushed and repo.git.head("main") == base
    assert repo.git.head(BRANCH) == pushed[0]
    task_state, landing, reason = state(task)
    assert (task_state, landing) == ("ready", "failed")
    assert reason.startswith(f"landing failed: the branch {BRANCH} of pull request #1 moved to")


def test_a_merge_group_past_the_time_limit_is_taken_out_of_the_queue(
    through, repo, team_ci, settings, django_capture_on_commit_callbacks
):
    task, _, _ = approved(through, repo, django_capture_on_commit_callbacks)
    settings.FACTORY_LANDING_CHECKS_TIMEOUT = 0.5

    def silent_on_the_group():
        team_ci.conclusion = None

    team_ci.then = silent_on_the_group

    land(through.project)

    assert (repo.pulls[1].merged, repo.pulls[1].queued) == (False, False)
    task_state, landing, reason = state(task)
    assert (task_state, landing) == ("ready", "failed")
    assert "was still in main's merge queue on the host after" in reason


def test_pull_request_mode_may_be_switched_on_for_a_target_with_a_merge_queue(
    hosted, repo, github, api, settings
):
    settings.FACTORY_LOCAL_REPOSITORY_ROOTS = [str(github.world.root)]
    repo.protect("main", QUEUED)
    project = hosted.project
    verified_by_the_runner(hosted, repo)
    before = Event.objects.count()

    response = api(hosted.manager).patch(
        f"/api/v1/projects/{project.slug}/", {"landing": {"mode": "pull_request"}}, format="json"
    )

    assert response.status_code == 200, response.content
    project.refresh_from_db()
    assert project.landing_settings["mode"] == "pull_request"
    assert Event.objects.count() == before + 1


def queued_ahead(github, repo, team_ci, files) -> Pull:
    """A person's pull request #9 from ``theirs`` (writing ``files``), queued first; its
    merge group goes green (the team's CI and a review of their own) once the site posts
    its checks anywhere."""
    repo.git.commit("theirs", files, "theirs", start="main")
    theirs = repo.pulls[9] = Pull(9, "PR_9", "theirs", "main", "Theirs", "a person's", False, "ann")
    github.world.enqueue(repo, theirs)

    def theirs_pass():
        if theirs.group is not None:
            head = theirs.group.head_sha
            repo.statuses.extend(
                [(head, "ci", "success"), (head, "factory-memory/review", "success")]
            )
        team_ci.then = theirs_pass

    team_ci.then = theirs_pass
    return theirs


def test_a_merge_group_behind_someone_elses_is_verified_before_it_is_vouched_for(
    through, repo, github, team_ci, django_capture_on_commit_callbacks
):
    task, _, _ = approved(through, repo, django_capture_on_commit_callbacks)
    theirs = queued_ahead(github, repo, team_ci, feature("gamma"))

    land(through.project)

    main = repo.git.head("main")
    task.refresh_from_db()
    assert (task.state, task.landed_commit) == ("done", main)
    assert theirs.merged and repo.pulls[1].merged
    assert {"alpha.py", "gamma.py"} <= set(repo.git.git("ls-tree", "--name-only", main).split())
    batch = Batch.objects.get()
    assert batch.verify_runs == 2  # the change on the tip, then its group on theirs
    assert (batch.state, batch.result) == (BatchState.LANDED, main)
    assert batch.tree == repo.git.git("rev-parse", f"{main}^{{tree}}")


def test_a_merge_group_behind_an_unapproved_pull_request_is_never_vouched_for(
    through, repo, github, team_ci, settings, django_capture_on_commit_callbacks
):
    task, _, _ = approved(through, repo, django_capture_on_commit_callbacks)
    settings.FACTORY_LANDING_CHECKS_TIMEOUT = 1
    theirs = queued_ahead(github, repo, team_ci, feature("gamma"))
    team_ci.then = None  # their group never goes green: nobody here approved it
    base = repo.git.head("main")

    land(through.project)

    ours = repo.pulls[1]
    assert (theirs.queued, ours.queued, ours.merged, repo.git.head("main")) == (
        True,
        False,
        False,
        base,
    )
    # GitHub merges a passing group with what is queued ahead of it: the site posted
    # nothing on a group that held someone else's unapproved change.
    site = {c.head_sha for c in repo.checks.values() if c.name.startswith("factory-memory/")}
    assert theirs.group.head_sha not in site
    assert not [sha for sha in site if repo.git.contains(theirs.group.head_sha, sha)]
    task_state, landing, reason = state(task)
    assert (task_state, landing) == ("ready", "failed")
    assert "was still in main's merge queue on the host after" in reason


def test_a_merge_group_failing_because_of_what_is_ahead_blames_nobody(
    through, repo, github, team_ci, django_capture_on_commit_callbacks
):
    task, _, _ = approved(through, repo, django_capture_on_commit_callbacks)
    queued_ahead(github, repo, team_ci, broken("delta"))  # their own test fails anywhere

    land(through.project)

    assert (repo.pulls[1].merged, repo.pulls[1].queued) == (False, False)
    task_state, landing, reason = state(task)
    assert (task_state, landing) == ("approved", "error")
    assert "fails the project's tests on its own: tests/test_delta.py" in reason
    assert reason.endswith("the change stays queued")
    assert Batch.objects.get().state == BatchState.ERROR


def test_a_lander_killed_while_queued_leaves_it_in_the_queue_and_the_next_lands_it(
    through, repo, monkeypatch, django_capture_on_commit_callbacks
):
    task, _, _ = approved(through, repo, django_capture_on_commit_callbacks)
    vouch = through_host._vouch
    calls = []

    def killed_before_the_first_vouch(*args):
        calls.append(args)
        if len(calls) == 1:
            raise Killed
        return vouch(*args)

    monkeypatch.setattr(through_host, "_vouch", killed_before_the_first_vouch)
    with pytest.raises(Killed):
        land(through.project)
    assert (repo.pulls[1].queued, repo.pulls[1].merged) == (True, False)

    counts = land(through.project)

    task.refresh_from_db()
    assert (counts["settled"], counts["landed"], len(calls)) == (1, 1, 2)
    assert (task.state, task.landed_commit) == ("done", repo.git.head("main"))
    assert [b.state for b in Batch.objects.order_by("pk")] == [
        BatchState.ABANDONED,
        BatchState.LANDED,
    ]


def test_a_lander_killed_after_vouching_is_settled_from_the_host_as_landed(
    through, repo, team_ci, django_capture_on_commit_callbacks
):
    task, _, _ = approved(through, repo, django_capture_on_commit_callbacks)
    posts = []

    def killed_once_the_group_is_green():  # the first checks are on the pull request's head
        posts.append(True)
        if len(posts) == 2:
            raise Killed
        team_ci.then = killed_once_the_group_is_green

    team_ci.then = killed_once_the_group_is_green
    with pytest.raises(Killed):
        land(through.project)

    counts = land(through.project)

    task.refresh_from_db()
    assert (counts["settled"], counts.get("landed", 0)) == (1, 0)
    assert (task.state, task.landed_commit) == ("done", repo.git.head("main"))
    assert repo.pulls[1].merge_commit_sha == task.landed_commit
    assert [b.state for b in Batch.objects.order_by("pk")] == [BatchState.LANDED]


class Killed(BaseException):
    """The lander's worker killed (SIGKILL does not run ``except Exception``)."""


def test_a_managers_revert_lands_through_the_merge_queue_too(
    through, repo, api, django_capture_on_commit_callbacks
):
    task, _, _ = approved(through, repo, django_capture_on_commit_callbacks)
    before = repo.git.head("main")
    land(through.project)
    task.refresh_from_db()
    landed_at = task.landed_commit
    response = api(through.manager).post(
        f"/api/v1/tasks/{task.key}/revert/", {"reason": "alpha broke the export"}, format="json"
    )
    assert response.status_code == 200, response.content

    counts = land(through.project)

    tip = repo.git.head("main")
    assert counts["reverted"] == 1
    assert (repo.pulls[2].merged, repo.pulls[2].merge_commit_sha) == (True, tip)
    assert repo.git.git("rev-parse", f"{tip}^") == landed_at
    assert repo.git.git("rev-parse", f"{tip}^{{tree}}") == repo.git.git(
        "rev-parse", f"{before}^{{tree}}"
    )
    task.refresh_from_db()
    assert (task.state, task.landed_commit) == ("ready", "")
