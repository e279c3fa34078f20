"""Landing through the task's pull request (``landing.mode: pull_request``, ADR 0041),
against the GitHub stand-in: its ``main`` is protected (a direct push is refused, GH006),
requires ``ci`` and ``factory-memory/review`` and branches up to date. The lander builds
and verifies the change as for ``push`` (the runner scripted: ``tests.landing.conftest``),
then sets the pull request's branch to the verified commit, posts its checks, waits for
the team's CI and merges pinned to that head."""

import subprocess
from types import SimpleNamespace

import pytest

from codehosts import landing as host_landing
from codehosts.models import HostDelivery
from codehosts.sync import hosts_reconcile
from landing import through_host
from landing.lander import land
from landing.models import Batch, BatchState
from projects.models import Event
from tasks import attempts, review
from tasks.models import Attempt
from tests.codehosts.conftest import REPOSITORY
from tests.codehosts.test_deliveries import SECRET, deliver
from tests.codehosts.through import BRANCH, approved, state, verified_by_the_runner
from tests.factories import all_met
from tests.github_standin.world import Protection
from tests.landing.conftest import feature


def test_a_change_lands_through_its_pull_request_on_a_protected_target(
    through, repo, django_capture_on_commit_callbacks
):
    task, _, _sha = approved(through, repo, django_capture_on_commit_callbacks)
    base = repo.git.head("main")

    counts = land(through.project)

    merged = repo.git.head("main")
    pull = repo.pulls[1]
    assert counts["landed"] == 1
    assert (pull.state, pull.merged, pull.merge_commit_sha) == ("closed", True, merged)
    assert repo.git.git("rev-parse", f"{merged}^") == base  # squash: one commit on the tip
    head = repo.git.head(BRANCH)
    assert repo.git.git("rev-parse", f"{head}^") == base  # the branch is the built commit
    assert repo.git.git("rev-parse", f"{merged}^{{tree}}") == repo.git.git(
        "rev-parse", f"{head}^{{tree}}"
    )
    assert "Factory-Task: WID-1" in repo.git.git("log", "-1", "--format=%B", merged)
    assert sorted((c.name, c.conclusion) for c in repo.checks.values() if c.head_sha == head) == [
        ("factory-memory/review", "success"),
        ("factory-memory/runner", "success"),
    ]
    task.refresh_from_db()
    assert (task.state, task.landed_commit) == ("done", merged)
    batch = Batch.objects.get()
    assert (batch.state, batch.result, batch.reason) == (
        BatchState.LANDED,
        head,
        f"merged as {merged} through the pull request, tree {batch.tree}",
    )


def test_a_merge_whose_tree_is_not_the_verified_one_is_a_loud_error(
    through, repo, monkeypatch, django_capture_on_commit_callbacks
):
    task, _, _ = approved(through, repo, django_capture_on_commit_callbacks)
    real = repo.git.merge_tree

    def smuggling(base, head):  # a host that merges one file more than it was given
        listing = repo.git.git("ls-tree", real(base, head))
        blob = repo.git.git("hash-object", "-w", "--stdin", stdin=b"smuggled\n")
        return repo.git.git("mktree", stdin=f"{listing}\n100644 blob {blob}\tSMUGGLED\n".encode())

    monkeypatch.setattr(repo.git, "merge_tree", smuggling)
    errors = []
    monkeypatch.setattr(
        "landing.through_host.logger.error", lambda text, *args: errors.append(text % args)
    )

    land(through.project)

    merged = repo.git.head("main")
    task.refresh_from_db()
    assert (task.state, task.landed_commit) == ("done", merged)  # it is on the target
    batch = Batch.objects.get()
    assert batch.reason.startswith(f"merged as {merged}, whose tree ")
    assert f"is NOT the verified tree {batch.tree}" in batch.reason
    assert errors == [f"landing batch {batch.pk} of WID: {batch.reason}"]


def test_the_protected_target_refuses_a_direct_push(through, repo):
    other = repo.git.commit("elsewhere", {"x.py": "x\n"}, "x", start="main")
    pushed = subprocess.run(
        ["git", "push", str(repo.git.path), f"{other}:refs/heads/main"],
        cwd=repo.git.path, capture_output=True, text=True,
    )  # fmt: skip
    assert pushed.returncode != 0 and "GH006" in pushed.stderr


def test_one_change_per_merge(through, repo, django_capture_on_commit_callbacks):
    first, _, _ = approved(through, repo, django_capture_on_commit_callbacks)
    second, _, _ = approved(
        through, repo, django_capture_on_commit_callbacks, feature("beta"), branch="fm/WID-2"
    )
    Project = type(through.project)
    Project.objects.filter(pk=through.project.pk).update(
        landing={**through.project.landing, "batch_max": 4}
    )
    base = repo.git.head("main")

    counts = land(Project.objects.get(pk=through.project.pk))

    assert counts["landed"] == 2
    assert [len(b.changes) for b in Batch.objects.order_by("pk")] == [1, 1]
    assert [repo.pulls[n].merged for n in sorted(repo.pulls)] == [True, True]
    first.refresh_from_db(), second.refresh_from_db()
    assert repo.git.git("rev-list", "--reverse", f"{base}..main").split() == [
        first.landed_commit,
        second.landed_commit,
    ]


def test_a_failing_required_check_sends_the_change_back_naming_it(
    through, repo, team_ci, django_capture_on_commit_callbacks
):
    task, _attempt, _ = approved(through, repo, django_capture_on_commit_callbacks)
    team_ci.conclusion = "failure"
    base = repo.git.head("main")

    land(through.project)

    assert repo.git.head("main") == base and repo.pulls[1].merged is False
    task_state, landing, reason = state(task)
    assert (task_state, landing) == ("ready", "failed")
    assert reason.startswith("landing failed: the required check ci (failure) of main did not")
    batch = Batch.objects.get()
    assert (batch.state, batch.reason) == (BatchState.RETURNED, reason)


def test_a_check_pending_past_the_time_limit_sends_the_change_back_naming_it(
    through, repo, team_ci, django_capture_on_commit_callbacks
):
    task, _, _ = approved(through, repo, django_capture_on_commit_callbacks)
    team_ci.conclusion = None  # the team's CI never reports
    base = repo.git.head("main")

    land(through.project)

    assert repo.git.head("main") == base and repo.pulls[1].merged is False
    task_state, landing, reason = state(task)
    assert (task_state, landing) == ("ready", "failed")
    assert "the required check ci of main still pending on" in reason
    assert reason.endswith("after 0.3 s (FACTORY_LANDING_CHECKS_TIMEOUT)")


def test_a_target_that_moved_before_the_merge_is_built_on_again_and_lands(
    through, repo, team_ci, django_capture_on_commit_callbacks
):
    task, _, _ = approved(through, repo, django_capture_on_commit_callbacks)
    moved = []
    team_ci.then = lambda: moved.append(repo.git.commit("main", {"NEWS": "news\n"}, "person"))

    land(through.project)

    merged = repo.git.head("main")
    assert repo.git.git("rev-parse", f"{merged}^") == moved[0]  # built on the person's commit
    task.refresh_from_db()
    assert (task.state, task.landed_commit) == ("done", merged)
    batch = Batch.objects.get()
    assert (batch.state, batch.pushes, batch.base) == (BatchState.LANDED, 2, moved[0])


def test_a_persons_push_to_the_branch_sends_the_change_back(
    through, repo, django_capture_on_commit_callbacks
):
    task, _, _ = approved(through, repo, django_capture_on_commit_callbacks)
    theirs = repo.git.commit(BRANCH, {"alpha.py": "changed\n"}, "a person's fix")
    base = repo.git.head("main")

    land(through.project)

    assert (repo.git.head("main"), repo.git.head(BRANCH)) == (base, theirs)  # nothing overwritten
    task_state, landing, reason = state(task)
    assert (task_state, landing) == ("ready", "failed")
    assert reason.startswith(f"landing failed: the branch {BRANCH} of pull request #1 moved to")
    assert Batch.objects.get().state == BatchState.RETURNED


def test_a_pull_request_closed_while_it_is_merged_sends_the_change_back_not_the_queue_into_error(
    through, repo, github, team_ci, django_capture_on_commit_callbacks
):
    task, _, _ = approved(through, repo, django_capture_on_commit_callbacks)
    base = repo.git.head("main")
    team_ci.then = lambda: github.world.close_pull(repo, 1, "ann")  # after the checks

    land(through.project)

    assert repo.git.head("main") == base
    task_state, landing, reason = state(task)
    assert (task_state, landing) == ("ready", "failed")
    assert reason == (
        "landing failed: pull request #1 was closed on the host while it was being merged; "
        "submit again from an open pull request"
    )
    assert Batch.objects.get().state == BatchState.RETURNED


def test_a_merge_answered_502_after_it_happened_lands_once(
    through, repo, github, django_capture_on_commit_callbacks
):
    task, _, _ = approved(through, repo, django_capture_on_commit_callbacks)
    base = repo.git.head("main")
    github.fail("lost", match=f"PUT /repos/{REPOSITORY}/pulls/1/merge")

    land(through.project)

    merged = repo.git.head("main")
    assert repo.git.git("rev-list", "--count", f"{base}..{merged}") == "1"
    task.refresh_from_db()
    assert (task.state, task.landed_commit) == ("done", merged)
    assert Batch.objects.get().state == BatchState.LANDED


def test_a_merge_refused_with_502_before_it_happened_stays_queued_and_lands_later(
    through, repo, github, django_capture_on_commit_callbacks
):
    task, _, _ = approved(through, repo, django_capture_on_commit_callbacks)
    base = repo.git.head("main")
    github.fail("502", match=f"PUT /repos/{REPOSITORY}/pulls/1/merge")

    land(through.project)

    assert repo.git.head("main") == base
    assert state(task)[:2] == ("approved", "error")
    erred = Batch.objects.get()
    assert erred.state == BatchState.ERROR and "the host did not merge" in erred.reason
    land(through.project)  # the back-off is 0 s: it looks again at once
    task.refresh_from_db()
    assert (task.state, task.landed_commit) == ("done", repo.git.head("main"))
    assert repo.git.git("rev-list", "--count", f"{base}..main") == "1"


def test_host_trouble_before_the_merge_ends_the_batch_in_error_with_the_change_queued(
    through, repo, github, django_capture_on_commit_callbacks
):
    task, _, _ = approved(through, repo, django_capture_on_commit_callbacks)
    github.fail("502", count=20, match="/check-runs")
    base = repo.git.head("main")

    land(through.project)

    assert (repo.git.head("main"), repo.pulls[1].merged) == (base, False)
    task_state, landing, reason = state(task)
    assert (task_state, landing) == ("approved", "error")
    assert reason.startswith("nothing landed: the code host could not answer")


def test_host_trouble_batch_after_batch_never_sends_the_change_back(
    through, repo, github, settings, django_capture_on_commit_callbacks
):
    task, _, _ = approved(through, repo, django_capture_on_commit_callbacks)
    trouble = github.fail("502", count=1000, match="/check-runs")

    for _ in range(settings.FACTORY_LANDING_HEAD_ERRORS + 2):
        land(through.project)

    attempt = Attempt.objects.get(task=task)
    assert state(task)[:2] == ("approved", "error")  # queued, never returned for it
    assert attempt.landing.get("errors", 0) == 0
    assert Batch.objects.filter(state=BatchState.ERROR).count() == 5
    trouble.count = 0  # the host is back
    land(through.project)
    task.refresh_from_db()
    assert (task.state, task.landed_commit) == ("done", repo.git.head("main"))


class Killed(BaseException):
    """The lander's worker killed (SIGKILL does not run ``except Exception``)."""


def test_a_lander_killed_mid_merge_is_settled_from_the_host(
    through, repo, monkeypatch, django_capture_on_commit_callbacks
):
    task, _, _ = approved(through, repo, django_capture_on_commit_callbacks)
    merge = host_landing.HostLanding.merge

    def merged_then_killed(landing, pull, **kwargs):
        merge(landing, pull, **kwargs)
        raise Killed

    monkeypatch.setattr(host_landing.HostLanding, "merge", merged_then_killed)
    with pytest.raises(Killed):
        land(through.project)
    assert (Batch.objects.get().state, state(task)[:2]) == (
        BatchState.PUSHING,
        ("approved", "landing"),
    )
    monkeypatch.setattr(host_landing.HostLanding, "merge", merge)

    counts = land(through.project)

    task.refresh_from_db()
    assert counts["settled"] == 1
    assert (task.state, task.landed_commit) == ("done", repo.git.head("main"))
    batch = Batch.objects.get()
    assert (batch.state, batch.reason) == (
        BatchState.LANDED,
        "its lander stopped after pushing; settled from the host: its pull request is merged",
    )


# --- Switching the mode -----------------------------------------------------------------------


def test_pull_request_mode_without_a_github_host_is_a_400_naming_the_field(flow, api):
    before = (flow.project.landing, Event.objects.count())

    response = api(flow.manager).patch(
        f"/api/v1/projects/{flow.project.slug}/",
        {"landing": {"mode": "pull_request"}, "name": "Renamed"},
        format="json",
    )

    assert response.status_code == 400
    assert "landing.mode" in response.json()["fields"]
    flow.project.refresh_from_db()
    assert (flow.project.landing, Event.objects.count(), flow.project.name) == (
        *before,
        flow.project.name,
    )
    assert flow.project.name != "Renamed"


@pytest.mark.parametrize(
    "protection, code",
    [
        (Protection(required_checks=["ci"], strict=False), "landing_target_not_strict"),
        (None, "landing_target_not_strict"),
    ],
)
def test_pull_request_mode_without_a_merge_queue_needs_a_strict_target(
    hosted, repo, github, api, settings, protection, code
):
    settings.FACTORY_LOCAL_REPOSITORY_ROOTS = [str(github.world.root)]
    if protection is not None:
        repo.protect("main", protection)
    project = hosted.project
    verified_by_the_runner(hosted, repo)
    project.refresh_from_db()
    before = (project.landing, project.name, Event.objects.count())

    response = api(hosted.manager).patch(
        f"/api/v1/projects/{project.slug}/",
        {"landing": {"mode": "pull_request"}, "name": "Renamed"},
        format="json",
    )

    assert (response.status_code, response.json()["code"]) == (409, code)
    project.refresh_from_db()
    assert (project.landing, project.name, Event.objects.count()) == before


def test_removing_the_github_host_under_pull_request_mode_is_a_400(
    through, api, django_capture_on_commit_callbacks
):
    project = through.project
    before = (project.code_host, project.landing, Event.objects.count())

    response = api(through.manager).patch(
        f"/api/v1/projects/{project.slug}/", {"code_host": {"provider": "none"}}, format="json"
    )

    assert response.status_code == 400
    assert "code_host" in response.json()["fields"]
    project.refresh_from_db()
    assert (project.code_host, project.landing, Event.objects.count()) == before


def landed_then_reverting(flow, repo, api, capture, reason="alpha broke the nightly export"):
    """A task landed through its pull request (#1), and its revert asked for through the
    API; the lander has not run since."""
    task, _, _ = approved(flow, repo, capture)
    before = repo.git.head("main")
    land(flow.project)
    task.refresh_from_db()
    response = api(flow.manager).post(
        f"/api/v1/tasks/{task.key}/revert/", {"reason": reason}, format="json"
    )
    assert response.status_code == 200, response.content
    return task, before


def test_a_managers_revert_lands_through_a_pull_request_of_its_own(
    through, repo, api, django_capture_on_commit_callbacks
):
    task, before = landed_then_reverting(through, repo, api, django_capture_on_commit_callbacks)
    landed_at = task.landed_commit
    branch = f"factory-memory/revert-{task.key}-{landed_at[:12]}"

    counts = land(through.project)

    tip = repo.git.head("main")
    pull = repo.pulls[2]
    assert counts["reverted"] == 1
    assert (pull.head, pull.base, pull.state, pull.merged) == (branch, "main", "closed", True)
    assert pull.merge_commit_sha == tip
    assert f"Factory-Reverts: {landed_at}" in repo.git.git("log", "-1", "--format=%B", tip)
    assert pull.title == f"Revert {task.key}: Add {BRANCH}"
    assert "alpha broke the nightly export" in pull.body
    assert repo.git.git("rev-parse", f"{tip}^") == landed_at  # on the tip it was built on
    assert repo.git.git("rev-parse", f"{tip}^{{tree}}") == repo.git.git(
        "rev-parse", f"{before}^{{tree}}"
    )  # the landed change taken out, nothing else
    head = repo.git.head(branch)
    assert sorted((c.name, c.conclusion) for c in repo.checks.values() if c.head_sha == head) == [
        ("factory-memory/review", "success"),
        ("factory-memory/runner", "success"),
    ]
    review = next(c for c in repo.checks.values() if c.head_sha == head and "review" in c.name)
    assert (
        f"{through.manager.username} asked for the revert of {landed_at}"
        in review.output["summary"]
    )
    task.refresh_from_db()
    attempt = Attempt.objects.filter(task=task).latest("pk")
    assert (task.state, task.landed_commit) == ("ready", "")
    assert attempt.landing["state"] == "reverted"
    assert attempt.landing["revert"]["commit"] == tip
    assert attempt.landing["revert"]["pull"]["number"] == 2
    assert Event.objects.get(task=task, transition="revert").extra["reverts"] == landed_at
    batch = Batch.objects.latest("pk")
    assert (batch.state, batch.reason) == (
        BatchState.LANDED,
        f"merged as {tip} through the pull request, tree {batch.tree}",
    )


def test_after_a_revert_the_sweep_opens_no_pull_request_for_the_merged_branch(
    through, repo, api, django_capture_on_commit_callbacks
):
    landed_then_reverting(through, repo, api, django_capture_on_commit_callbacks)
    land(through.project)
    pulls = sorted(repo.pulls)

    hosts_reconcile()

    assert sorted(repo.pulls) == pulls == [1, 2]


def test_the_reverts_pull_request_merged_is_no_tasks_pull_request(
    through, repo, api, github, client, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setenv("FACTORY_HOST_WIDGETS_HOOK", SECRET)
    task, _ = landed_then_reverting(through, repo, api, django_capture_on_commit_callbacks)
    land(through.project)
    task.refresh_from_db()
    before = (task.state, Event.objects.count(), sorted(repo.pulls))

    with django_capture_on_commit_callbacks(execute=True):
        deliver(client, github, delivery="d-revert", action="closed", number=2, merged=True)

    assert HostDelivery.objects.get(delivery_id="d-revert").result == (
        f"pull request #2 is no task's of {through.project.slug}"
    )
    task.refresh_from_db()
    assert (task.state, Event.objects.count(), sorted(repo.pulls)) == before


def test_a_revert_whose_required_check_fails_comes_back_and_the_task_stays_done(
    through, repo, api, team_ci, django_capture_on_commit_callbacks
):
    task, _ = landed_then_reverting(through, repo, api, django_capture_on_commit_callbacks)
    landed_at = repo.git.head("main")
    team_ci.conclusion = "failure"

    land(through.project)

    assert repo.git.head("main") == landed_at
    assert repo.pulls[2].merged is False
    task.refresh_from_db()
    attempt = Attempt.objects.filter(task=task).latest("pk")
    assert (task.state, task.landed_commit, attempt.revert_at) == ("done", landed_at, None)
    revert = attempt.landing["revert"]
    assert revert["state"] == "returned"
    assert revert["why"].startswith(
        "landing failed: the required check ci (failure) of main did not pass on"
    )
    assert Batch.objects.latest("pk").state == BatchState.RETURNED
    assert Event.objects.filter(task=task, transition="revert_returned").count() == 1


def test_a_revert_branch_someone_else_pushed_to_is_neither_overwritten_nor_proposed(
    through, repo, api, django_capture_on_commit_callbacks
):
    task, _ = landed_then_reverting(through, repo, api, django_capture_on_commit_callbacks)
    landed_at = repo.git.head("main")
    branch = f"factory-memory/revert-{task.key}-{landed_at[:12]}"
    theirs = repo.git.commit(branch, {"theirs.txt": "mine\n"}, "theirs", start="main")

    land(through.project)

    assert (repo.git.head("main"), repo.git.head(branch)) == (landed_at, theirs)
    assert sorted(repo.pulls) == [1]
    attempt = Attempt.objects.filter(task=task).latest("pk")
    assert attempt.landing["revert"]["why"] == (
        f"not reverted: its branch {branch} holds {theirs[:12]}, which the site did not put "
        "there (someone pushed to it); delete the branch and ask for the revert again"
    )
    task.refresh_from_db()
    assert task.state == "done"


def test_a_lander_killed_mid_revert_leaves_it_queued_and_the_next_lands_it_on_the_same_branch(
    through, repo, api, team_ci, django_capture_on_commit_callbacks
):
    task, _ = landed_then_reverting(through, repo, api, django_capture_on_commit_callbacks)

    def killed():
        raise Killed

    team_ci.then = killed
    with pytest.raises(Killed):
        land(through.project)
    assert repo.pulls[2].state == "open"

    counts = land(through.project)

    task.refresh_from_db()
    assert (counts["settled"], counts["reverted"]) == (1, 1)
    assert sorted(repo.pulls) == [1, 2]  # its own pull request taken up again, not a third
    assert (repo.pulls[2].merged, task.state) == (True, "ready")
    assert [b.state for b in Batch.objects.order_by("pk")][1:] == [
        BatchState.ABANDONED,
        BatchState.LANDED,
    ]


def test_a_revert_merge_answered_502_after_it_happened_is_reverted_once(
    through, repo, api, github, django_capture_on_commit_callbacks
):
    task, _ = landed_then_reverting(through, repo, api, django_capture_on_commit_callbacks)
    landed_at = repo.git.head("main")
    github.fail("lost", match=f"PUT /repos/{REPOSITORY}/pulls/2/merge")

    land(through.project)

    tip = repo.git.head("main")
    assert repo.git.git("rev-list", "--count", f"{landed_at}..{tip}") == "1"
    task.refresh_from_db()
    assert task.state == "ready"
    assert Attempt.objects.filter(task=task).latest("pk").landing["revert"]["commit"] == tip


def test_a_lander_killed_before_the_merge_is_abandoned_and_the_next_lands_on_its_branch(
    through, repo, team_ci, django_capture_on_commit_callbacks
):
    task, _, _ = approved(through, repo, django_capture_on_commit_callbacks)

    def killed():
        raise Killed

    team_ci.then = killed
    with pytest.raises(Killed):
        land(through.project)
    first = repo.git.head(BRANCH)  # the site's own commit is on the branch now
    assert (repo.pulls[1].merged, state(task)[:2]) == (False, ("approved", "landing"))

    counts = land(through.project)

    task.refresh_from_db()
    assert (counts["settled"], counts["landed"]) == (1, 1)
    assert (task.state, task.landed_commit) == ("done", repo.git.head("main"))
    assert [b.state for b in Batch.objects.order_by("pk")] == [
        BatchState.ABANDONED,
        BatchState.LANDED,
    ]
    assert first in Attempt.objects.get(task=task).landing["pull"]["heads"]


class SlowCI:
    """The team's checks as a host reports them: pending for the first ``looks`` looks."""

    def __init__(self, looks: int):
        self.left = looks

    def checks(self, branch, commit):
        self.left -= 1
        state = "pending" if self.left >= 0 else "success"
        return through_host.Checks(required=("ci",), states={"ci": state})


def test_the_lander_looks_for_the_teams_checks_soon_then_ever_further_apart(settings, monkeypatch):
    settings.FACTORY_LANDING_CHECKS_TIMEOUT = 3600
    settings.FACTORY_LANDING_CHECKS_POLL_SECONDS = 15
    settings.FACTORY_LANDING_CHECKS_FIRST_LOOK_SECONDS = 1
    settings.FACTORY_LANDING_CHECKS_LISTEN_MS = 0  # no listening: each wait slept whole
    waits = []
    monkeypatch.setattr("landing.through_host.time.sleep", waits.append)
    batch = SimpleNamespace(target="main", base="b" * 40)

    through_host._wait_for_checks(SlowCI(looks=7), batch, "a" * 40)

    assert waits == [1, 2, 4, 8, 15, 15, 15]


def test_the_lander_lands_the_attempts_own_pull_request_when_the_site_knew_an_earlier_one(
    through, repo, monkeypatch, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    task, first = through.claimed(title="Add alpha")
    sha = repo.git.commit(BRANCH, feature("alpha"), "alpha", start="main")
    with capture(execute=True):
        attempts.attempt_submit(
            attempt=first, actor=through.agent, summary="alpha", change={"commit": sha, "branch": BRANCH}
        )  # fmt: skip
    with capture(execute=True):
        review.task_reject(task=task, actor=through.reviewer, reason="again, on a new branch")
    assert repo.pulls[1].state == "open"
    # The second attempt, from another branch, submitted and approved while the site's sync
    # of it does not reach the host: the site still knows #1 only.
    second = attempts.task_claim(agent=through.agent, project=through.project)
    again = repo.git.commit("fm/WID-1-b", feature("alpha"), "alpha again", start="main")
    with monkeypatch.context() as patched:
        patched.setattr("codehosts.pulls.pull_request_sync", lambda **_: "the host is down")
        with capture(execute=True):
            attempts.attempt_submit(
                attempt=second, actor=through.agent, summary="again",
                change={"commit": again, "branch": "fm/WID-1-b"},
            )  # fmt: skip
        second.refresh_from_db()
        review.task_approve(task=task, actor=through.reviewer, criteria=all_met(second))
    assert sorted(repo.pulls) == [1]

    land(through.project)

    task.refresh_from_db()
    assert (repo.pulls[1].state, repo.pulls[1].merged) == ("closed", False)
    assert (repo.pulls[2].head, repo.pulls[2].merged) == ("fm/WID-1-b", True)
    assert (task.state, task.landed_commit) == ("done", repo.pulls[2].merge_commit_sha)
