"""The runner demo (project RD): a real git repository, verified by the runner.

RD-1 is an honest change the runner verified (in review, with the runner's evidence);
RD-2 is a false claim: the agent attached a passing JUnit report for code whose test
fails, the runner ran the tests itself and the task went back to ready. Then landing is
turned on (docs/landing.md): RD-3 renames the claim and lands on main; RD-4's new test,
which passed at its own commit, calls the old name, so it comes back from the merge queue
with the failing test (a semantic conflict).
"""

import contextlib
import shutil

from django.conf import settings
from django.core.files.base import ContentFile
from django.db import transaction

from decisions import services as decisions
from demo.repository import VERIFY, build
from evidence import services as evidence
from evidence.models import FINISHED_GATE_STATES
from projects import services as project_services
from projects.errors import ServiceError
from projects.models import Project
from projects.policy import declares
from projects.queue import enqueue, foreground
from runner.sandbox import SandboxUnavailable, sandbox
from tasks import attempts, review, services
from tasks.landing import LAND_JOB
from tasks.models import AttemptState

SLUG = "RD"
POLICY = {"runner": {"required": True}, "required-evidence": {}, "tests-pass": {}, "diff-scope": {}}
CRITERIA = [
    {
        "key": "AC-1",
        "text": "Claims follow priority and respect dependencies; release puts a task back.",
        "proof": {"check": "tests", "select": "tests/test_claimqueue.py::*"},
    },
    {"key": "AC-2", "text": "The change is small and readable.", "proof": {"check": "review"}},
]
# What the agent of RD-2 claimed: both tests passed.
CLAIMED_JUNIT = (
    b'<testsuite name="unittest" tests="2"><testcase classname="tests.test_claimqueue.ClaimTest" '
    b'name="test_claim_takes_highest_priority_first"/><testcase '
    b'classname="tests.test_claimqueue.ClaimTest" '
    b'name="test_claim_skips_tasks_with_open_dependencies"/></testsuite>'
)


def seed_runner_demo(demo, out) -> bool:
    """Create project RD with the FM demo's cast; False (nothing added) without a sandbox."""
    if Project.objects.filter(slug=SLUG).exists():
        return False
    try:
        sandbox().check()
    except SandboxUnavailable as exc:
        out.write(f"Runner demo {SLUG} skipped: {exc}")
        return False
    path = settings.FACTORY_RUNNER_ROOT / "repositories" / "runner-demo"
    shutil.rmtree(path, ignore_errors=True)  # left by an earlier database
    repository = build(path)
    with transaction.atomic():
        project = project_services.project_create(
            slug=SLUG,
            name="Runner demo",
            repository_url=repository.url,
            verify=VERIFY,
            gate_policy=POLICY,
            actor=demo.maria,
        )
        for user, role in demo.memberships():
            project_services.membership_grant(
                user=user, project=project, role=role, actor=demo.maria
            )
        spec = decisions.spec_create(
            project=project,
            actor=demo.maria,
            title="The claim queue",
            body="# The claim queue\n\nHighest priority first; dependencies first; release puts back.\n",
            criteria=CRITERIA,
        )
        decisions.spec_version_accept(version=spec.versions.get(), actor=demo.maria)
        honest = _task(project, demo, spec, "Release puts a claimed task back", demo.ada)
        false_claim = _task(project, demo, spec, "Simplify the claim filter", demo.alan)
    for attempt, commit, agent, junit in (
        (honest, repository.honest, demo.ada, None),
        (false_claim, repository.false_claim, demo.alan, CLAIMED_JUNIT),
    ):
        if junit is not None:
            evidence.evidence_attach(
                attempt=attempt,
                actor=agent,
                file=ContentFile(junit, name="junit.xml"),
                kind="junit",
                criteria=["AC-1"],
            )
        # With Celery eager (make run) the jobs run here, before the command exits.
        with foreground():
            attempts.attempt_submit(
                attempt=attempt,
                actor=agent,
                summary=f"{attempt.task.title}; the tests pass.",
                change={"commit": commit, "branch": f"agent/{attempt.task.key.lower()}"},
                idempotency_key=f"demo-{attempt.task.key}",
            )
        _check(attempt)
    _seed_landing(project, demo, spec, repository)
    return True


def _seed_landing(project, demo, spec, repository) -> None:
    project_services.project_update(
        project=project, actor=demo.maria, landing={"mode": "push", "batch_max": 4}
    )
    project.refresh_from_db()
    pairs = [
        (
            _task(project, demo, spec, "Name the claim for what it does", demo.ada, priority=1),
            repository.rename,
        ),
        (
            _task(
                project, demo, spec, "Test that equal claims go oldest first", demo.alan, priority=1
            ),
            repository.fairness,
        ),
    ]
    for attempt, commit in pairs:
        with foreground():
            attempts.attempt_submit(
                attempt=attempt,
                actor=attempt.agent,
                summary=f"{attempt.task.title}; the tests pass.",
                change={"commit": commit, "branch": f"agent/{attempt.task.key.lower()}"},
                idempotency_key=f"demo-{attempt.task.key}",
            )
        _check(attempt)
    for attempt, _ in pairs:
        attempt.refresh_from_db()
        if attempt.state != AttemptState.PASSED:
            continue  # no sandbox after all: nothing to land
        # In the foreground: the lander an approval starts on commit must finish before
        # the command exits, not in a background thread that dies with it.
        with foreground():
            review.task_approve(
                task=attempt.task,
                actor=demo.rita,
                reason="Small and clear.",
                criteria=[{"key": "AC-2", "verdict": "met", "note": "small and readable"}],
            )
    # The lander, by its job's name (it lives above tasks), run here before the command
    # exits: RD-3 lands; RD-4 comes back with the test that fails once merged.
    with foreground():
        enqueue(LAND_JOB, project.pk)


def _task(project, demo, spec, title, agent, priority=0):
    task = services.task_create(
        project=project,
        actor=demo.maria,
        title=title,
        spec=spec,
        allowed_paths=["**"],
        priority=priority,
    )
    services.task_publish(task=task, actor=demo.maria)
    return attempts.task_claim(agent=agent, project=project, lease_seconds=3600)


def _check(attempt) -> None:
    """Run what no worker has run yet: the runner, then the gates that waited for it."""
    for run in sorted(
        attempt.gate_runs.all(), key=lambda run: not declares(run.gate, "goes_first")
    ):
        if run.state in FINISHED_GATE_STATES:
            continue
        with contextlib.suppress(ServiceError):  # a worker got there first
            evidence.gate_run_execute(run=run)
