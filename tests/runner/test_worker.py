"""The runner in real Celery worker processes with the Redis broker (PostgreSQL only).

A gate worker takes the queue ``factory`` and a runner takes ``verify``, each a process of
its own (runners can live on other machines). The agent pushes to a bare repository the
runner clones over ``file://``; the runner's job checks the commit out and runs its tests
in the real sandbox. The workers share the test database (the tests commit) and the
evidence store, and use Redis database 15, emptied before and after.
"""

import os
import subprocess
import time
from pathlib import Path

import pytest

from demo.repository import FAILING_TEST, VERIFY, build
from demo.runner_demo import CLAIMED_JUNIT as PASSING_JUNIT
from demo.runner_demo import CRITERIA, POLICY
from evidence.models import Evidence, GateRun
from projects import services as project_services
from projects.models import Event
from tasks import attempts, context, reconciler
from tasks.models import Task
from tests.conftest import postgres_only
from tests.workers import Worker, database_url, jobs_to_redis, wait_for

pytestmark = [postgres_only, pytest.mark.django_db(transaction=True)]

REDIS_URL = os.environ.get("FACTORY_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
SANDBOX_UID = "65534"


@pytest.fixture
def broker():
    """Send this process's jobs to Redis (database 15, emptied) instead of running them eagerly."""
    with jobs_to_redis(REDIS_URL) as queue:
        yield queue


@pytest.fixture
def start_worker(broker, settings, tmp_path, runner_root):
    """``start_worker(*queues)``: one worker per queue, started together, ready when it
    returns them; every one is stopped at the end."""
    workers = []

    def start(*queues):
        started = []
        for queue in queues:
            started.append(
                Worker(
                    queue,
                    log_path=tmp_path / f"worker{len(workers)}-{queue}.log",
                    broker_url=REDIS_URL,
                    database_url=database_url(),
                    media_root=settings.MEDIA_ROOT,
                    default_queue=broker,
                    env={
                        "FACTORY_RUNNER_ROOT": str(runner_root),
                        # The production default; it only applies when Celery is eager, as
                        # here it is not.
                        "FACTORY_EAGER_BACKGROUND_QUEUES": "verify",
                    },
                )
            )
            workers.append(started[-1])
        wait_for(lambda: all(w.ready() for w in started), 60, f"the workers of {queues}")
        return started

    try:
        yield start
    finally:
        for worker in workers:
            worker.stop()


@pytest.fixture
def origin(tmp_path):
    """A bare repository the agent pushed the demo's branches to, and the demo's commits."""
    demo = build(tmp_path / "demo")
    bare = tmp_path / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    subprocess.run(
        ["git", "push", "-q", str(bare), "honest", "false-claim", "main"],
        cwd=demo.path,
        capture_output=True,
        check=True,
    )
    return f"file://{bare}", demo


@pytest.fixture
def runner_flow(flow, origin):
    url, _ = origin
    project_services.project_update(
        project=flow.project,
        actor=flow.manager,
        repository_url=url,
        verify=VERIFY,
        gate_policy=POLICY,
    )
    flow.project.refresh_from_db()
    flow.spec_ = flow.spec(criteria=CRITERIA)
    return flow


def task_state(task):
    return Task.objects.get(pk=task.pk).state


def runs(attempt) -> dict:
    return {run.gate: run for run in GateRun.objects.filter(attempt=attempt)}


def submit(flow, commit, *, junit=None):
    task, attempt = flow.claimed(spec=flow.spec_, allowed_paths=["**"])
    agents = flow.attach(attempt, junit, kind="junit", name="junit.xml") if junit else None
    attempts.attempt_submit(
        attempt=attempt, actor=attempt.agent, summary="done", change={"commit": commit}
    )
    return task, attempt, agents


def sandbox_processes(runner_root: Path) -> list[str]:
    """Processes of the sandbox's user whose mounts show this test's runner root."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            uids = next(
                line.split()[1:]
                for line in (entry / "status").read_text().splitlines()
                if line.startswith("Uid:")
            )
            # Other tests may run sandboxes at the same time: only ours bind this root.
            if SANDBOX_UID in uids and str(runner_root) in (entry / "mountinfo").read_text():
                found.append(f"{entry.name} {(entry / 'cmdline').read_bytes()!r}")
        except OSError:  # gone, or a zombie whose mounts are gone
            continue
    return found


def workspaces(runner_root: Path) -> list[Path]:
    folder = runner_root / "workspaces"
    return sorted(folder.iterdir()) if folder.exists() else []


def test_the_runner_worker_catches_a_false_claim_and_the_next_context_names_the_test(
    runner_flow, origin, start_worker
):
    start_worker("factory", "verify")
    _, demo = origin

    task, attempt, agents = submit(runner_flow, demo.false_claim, junit=PASSING_JUNIT)

    wait_for(lambda: task_state(task) != "checking", 60, "the task to leave checking")
    gate = runs(attempt)
    runners = Evidence.objects.get(attempt=attempt, provenance="runner", kind="junit")
    attempt.refresh_from_db()
    assert (task_state(task), attempt.state) == ("ready", "failed")
    assert (gate["runner"].state, gate["tests-pass"].state) == ("failed", "failed")
    verdict = gate["tests-pass"].verdict
    assert (verdict["decided_on"], verdict["set_aside"]) == ([runners.pk], [agents.pk])
    second = attempts.task_claim(agent=runner_flow.agent2, project=runner_flow.project)
    (earlier,) = context.build(task, current=second)["attempts"]
    gates = {g["gate"]: g for g in earlier["gates"]}
    assert gates["tests-pass"]["summary"] == f"1 of 2 tests failed: {FAILING_TEST}"
    assert gates["runner"]["verdict"]["tests"]["failing"] == [FAILING_TEST]


def test_an_honest_commit_reaches_review_on_the_runner_workers_authoritative_evidence(
    runner_flow, origin, start_worker
):
    gates, runner = start_worker("factory", "verify")
    _, demo = origin

    task, attempt, _ = submit(runner_flow, demo.honest)

    wait_for(lambda: task_state(task) != "checking", 60, "the task to leave checking")
    assert task_state(task) == "in_review"
    assert {gate: run.state for gate, run in runs(attempt).items()} == dict.fromkeys(
        POLICY, "passed"
    )
    measured = Evidence.objects.filter(attempt=attempt).exclude(provenance="gate")
    assert sorted((e.kind, e.provenance, e.authoritative) for e in measured) == [
        ("diff", "runner", True),
        ("junit", "runner", True),
        ("log", "runner", True),
    ]
    junit = measured.get(kind="junit")
    assert runs(attempt)["tests-pass"].verdict["decided_on"] == [junit.pk]
    job = b"Task runner.jobs.verify_job["  # the runner's job ran on the runner, and only there
    assert (job in runner.log_path.read_bytes(), job in gates.log_path.read_bytes()) == (
        True,
        False,
    )


def test_a_runner_killed_mid_run_is_recovered_with_exactly_one_result(
    runner_flow, origin, start_worker, runner_root, settings
):
    project_services.project_update(
        project=runner_flow.project,
        actor=runner_flow.manager,
        verify={**VERIFY, "test": "sleep 20; python3 run_tests.py"},
        gate_policy={"runner": {"required": True}},
    )
    _, demo = origin
    (first,) = start_worker("verify")
    task, attempt, _ = submit(runner_flow, demo.honest)
    wait_for(lambda: sandbox_processes(runner_root), 60, "the runner's sandbox to start")
    assert GateRun.objects.get(attempt=attempt, gate="runner").state == "running"
    (killed,) = workspaces(runner_root)

    first.kill()  # SIGKILL mid-test: the job is neither finished nor acknowledged
    wait_for(lambda: not sandbox_processes(runner_root), 10, "the sandbox to die with its worker")
    settings.FACTORY_RUNNER_TIME_LIMIT, settings.FACTORY_GATE_GRACE_SECONDS = 1, 1
    time.sleep(2.5)  # past the runner's time limit and the grace the reconciler allows
    counts = reconciler.reconcile()  # re-queues the run
    counts |= reconciler.housekeeping()  # and sweeps the killed run's workspace
    left = workspaces(runner_root)
    project_services.project_update(
        project=runner_flow.project, actor=runner_flow.manager, verify=VERIFY
    )
    start_worker("verify")

    wait_for(lambda: task_state(task) == "in_review", 60, "the re-run runner to finish")
    assert (counts["gate_runs_requeued"], counts["workspaces_swept"], left) == (1, 1, [])
    run = GateRun.objects.get(attempt=attempt, gate="runner")  # one run for (attempt, runner)
    assert (run.state, run.tries) == ("passed", 2)
    measured = Evidence.objects.filter(attempt=attempt, provenance="runner")
    assert sorted(measured.values_list("kind", flat=True)) == ["diff", "junit", "log"]
    assert Event.objects.filter(object_key=f"{attempt} runner", transition="succeed").count() == 1
    assert sandbox_processes(runner_root) == []
    assert not killed.exists()
    assert workspaces(runner_root) == []  # the re-run removed its own
