"""Gates in a real Celery worker process with the Redis broker (PostgreSQL only).

The worker shares the test database, so these tests commit (transaction=True), and
it reads the same evidence store. They use Redis database 15, emptied before and after.
"""

import os
import time
from pathlib import Path

import pytest
import redis

from evidence.models import GateRun
from projects.models import Event
from tasks import attempts, reconciler, services
from tasks.models import Task
from tests.conftest import postgres_only
from tests.workers import Worker, database_url, jobs_to_redis, wait_for

pytestmark = [postgres_only, pytest.mark.django_db(transaction=True)]

REDIS_URL = os.environ.get("FACTORY_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
ROOT = Path(__file__).resolve().parents[2]
PASSING = (
    b"<testsuite tests='1'><testcase classname='tests.test_claim' name='test_claim'/></testsuite>"
)
FAILING = (
    b"<testsuite tests='2'><testcase classname='tests.test_claim' name='test_claim'/>"
    b"<testcase classname='tests.test_claim' name='test_skip_deps'><failure message='assert 2 == 3'/></testcase>"
    b"</testsuite>"
)


@pytest.fixture
def broker(settings):
    """Send this process's jobs to Redis (database 15, emptied) instead of running them eagerly."""
    with jobs_to_redis(REDIS_URL) as queue:
        yield queue


@pytest.fixture
def start_worker(broker, settings, tmp_path):
    workers = []

    def start():
        worker = Worker(
            broker,
            log_path=tmp_path / f"worker{len(workers)}.log",
            broker_url=REDIS_URL,
            database_url=database_url(),
            media_root=settings.MEDIA_ROOT,
            env={
                "FACTORY_EXTRA_GATES": "slow=tests.gates.SlowGate",
                "FACTORY_GATE_TIME_LIMIT": "20",
            },
        )
        workers.append(worker)
        wait_for(worker.ready, 60, "the worker to start")
        return worker

    yield start
    for worker in workers:
        worker.stop()


def task_state(task):
    return Task.objects.get(pk=task.pk).state


def submit_with(flow, junit, policy):
    flow.gates(policy)
    task, attempt = flow.claimed(title="gated")
    flow.attach(attempt, junit, kind="junit", name="junit.xml")
    attempts.attempt_submit(attempt=attempt, actor=flow.agent, summary="done", change={})
    return task, attempt


def test_submit_runs_the_gates_in_a_worker_and_the_task_reaches_review(flow, start_worker):
    start_worker()

    task, attempt = submit_with(flow, PASSING, {"tests-pass": {}})

    wait_for(lambda: task_state(task) == "in_review", 30, "the task to reach review")
    run = GateRun.objects.get(attempt=attempt)
    assert (run.state, run.summary, run.tries) == ("passed", "1 tests passed", 1)
    assert run.report.provenance == "gate"


def test_a_failed_gate_sends_the_task_back_with_its_verdict_in_the_next_context(flow, start_worker):
    start_worker()

    task, _ = submit_with(flow, FAILING, {"tests-pass": {}})

    wait_for(lambda: task_state(task) == "ready", 30, "the task to go back to ready")
    attempts.task_claim(agent=flow.agent2)
    bundle = services.task_context(task=Task.objects.get(pk=task.pk), actor=flow.agent2)
    (gate,) = bundle["attempts"][0]["gates"]
    assert (gate["gate"], gate["state"]) == ("tests-pass", "failed")
    assert gate["verdict"]["failed"][0]["test"].endswith("test_skip_deps")
    assert gate["report"].startswith("/api/v1/evidence/")


def test_a_worker_killed_mid_gate_is_recovered_with_exactly_one_result(
    flow, start_worker, settings
):
    settings.FACTORY_GATE_TIME_LIMIT, settings.FACTORY_GATE_GRACE_SECONDS = 1, 1
    first = start_worker()
    task, attempt = submit_with(flow, PASSING, {"slow": {}})
    wait_for(
        lambda: GateRun.objects.get(attempt=attempt).state == "running", 30, "the gate to start"
    )

    first.kill()  # SIGKILL, mid-gate: the job is neither finished nor acknowledged
    start_worker()
    time.sleep(2.5)  # past the time limit and grace the reconciler allows a running gate
    counts = reconciler.reconcile()

    wait_for(lambda: task_state(task) == "in_review", 60, "the re-run gate to finish")
    assert counts["gate_runs_requeued"] == 1
    run = GateRun.objects.get(attempt=attempt)  # exactly one run for (attempt, gate)
    assert (run.state, run.tries) == ("passed", 2)
    assert Event.objects.filter(object_key=f"{attempt} slow", transition="succeed").count() == 1


def test_jobs_lost_with_a_flushed_redis_are_sent_again_by_the_reconciler(
    flow, start_worker, settings, broker
):
    settings.FACTORY_GATE_REQUEUE_AFTER = 0
    task, attempt = submit_with(flow, PASSING, {"tests-pass": {}})
    redis.Redis.from_url(REDIS_URL).flushdb()  # the queued job is gone
    start_worker()
    time.sleep(1)
    assert task_state(task) == "checking"

    counts = reconciler.reconcile()

    wait_for(lambda: task_state(task) == "in_review", 30, "the re-sent gate to finish")
    assert counts["gate_runs_redispatched"] == 1
    assert GateRun.objects.get(attempt=attempt).tries == 1
