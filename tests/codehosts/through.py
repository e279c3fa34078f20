"""What the tests of landing through a host share (``landing.mode: pull_request``): the
team's CI on the stand-in, a change approved with its pull request open, and where a task
stands; the fixtures ``team_ci`` and ``through`` (tests/codehosts/conftest.py) use them."""

from codehosts import landing as host_landing
from projects import services as project_services
from tasks import attempts, review
from tasks.models import Attempt, Task
from tests.factories import all_met
from tests.github_standin.world import Check, Protection
from tests.landing.conftest import feature

BRANCH = "fm/WID-1"
VERIFY = {"test": "python3 run_tests.py", "junit": "reports/junit.xml", "timeout_seconds": 60}
STRICT = Protection(required_checks=["ci", "factory-memory/review"], strict=True)


class TeamCI:
    """The team's CI: each time the site posts its checks on a commit, it posts ``ci`` there
    too (``conclusion``: a status ``success``, a check run ``failure``…; None: never)."""

    def __init__(self, repo, monkeypatch):
        self.repo, self.conclusion, self.then = repo, "success", None
        posted = host_landing.HostLanding.post_checks

        def post_checks(landing, attempt, commit, **summaries):
            posted(landing, attempt, commit, **summaries)
            if self.conclusion == "success":
                repo.statuses.append((commit, "ci", "success"))
            elif self.conclusion is not None:
                check = Check(len(repo.checks) + 9000, "CR", "ci", commit, "completed",
                              self.conclusion, None)  # fmt: skip
                repo.checks[check.id] = check
            then, self.then = self.then, None  # once
            if then is not None:
                then()

        monkeypatch.setattr(host_landing.HostLanding, "post_checks", post_checks)


def verified_by_the_runner(flow, repo) -> None:
    """``flow``'s project on the stand-in's repository, the runner in its policy: what
    landing needs before its mode is switched on."""
    project_services.project_update(
        project=flow.project, actor=flow.manager, repository_url=f"file://{repo.git.path}",
        verify=VERIFY,
    )  # fmt: skip
    flow.gates({"runner": {}})


def approved(flow, repo, capture, files=None, branch=BRANCH):
    """A task whose change (on ``branch``) has its pull request (opened by the sync job) and
    is approved, queued to land; the lander has not run."""
    task, attempt = flow.claimed(title=f"Add {branch}")
    sha = repo.git.commit(branch, files or feature("alpha"), "alpha", start="main")
    with capture(execute=True):
        attempts.attempt_submit(
            attempt=attempt, actor=flow.agent, summary="alpha", change={"commit": sha, "branch": branch}
        )  # fmt: skip
    attempt.refresh_from_db()
    review.task_approve(task=task, actor=flow.reviewer, criteria=all_met(attempt))
    task.refresh_from_db()
    attempt.refresh_from_db()
    assert (task.state, attempt.landing["state"]) == ("approved", "queued")
    assert repo.pulls[max(repo.pulls)].head == branch
    return task, attempt, sha


def state(task):
    task = Task.objects.get(pk=task.pk)
    attempt = Attempt.objects.filter(task=task).latest("pk")
    return task.state, attempt.landing["state"], attempt.landing.get("reason", "")
