"""The lander in real Celery worker processes, killed with SIGKILL (docs/landing.md, "A
lander that dies").

Each test queues approved changes on a real origin repository, sends the lander's job to
a worker on the landers' queue ``land`` and kills the worker's whole process group (its
job, the sandbox, ``git push`` and the origin's ``receive-pack``) at the moment it needs:
mid-verify, or while the origin's hook holds the push. The reconciler then wakes the
lander, as it does in production, and a new worker finishes: every change lands once, on a
target that only moved forward. The workers share the test database (the tests commit;
on SQLite a file copy, ``tests.workers.database_for_workers``), the evidence store and
the runner root, and use Redis database 14, emptied before and after.
"""

import ast
import contextlib
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import redis

from landing.jobs import land_job
from landing.models import ACTIVE_BATCH_STATES, Batch
from projects import services as project_services
from projects.models import Event
from tasks import reconciler
from tasks.models import Task
from tests.landing.conftest import VERIFY, feature
from tests.runner.conftest import SANDBOX_UID
from tests.workers import Worker, database_for_workers, jobs_to_redis, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

REDIS_URL = os.environ.get("FACTORY_TEST_LANDING_REDIS_URL", "redis://127.0.0.1:6379/14")
RESULT = re.compile(rb"landing\.jobs\.land_job\[[^\]]+\] succeeded in [0-9.]+s: (\{.*\})$")
ENDED = re.compile(rb"landing\.jobs\.land_job\[[^\]]+\] (?:succeeded|raised)")
STOPPED_BEFORE = "its lander stopped before pushing; its changes stay queued"
STOPPED_AFTER = "its lander stopped after pushing; settled from the target"


@pytest.fixture(autouse=True)
def database(transactional_db, tmp_path):
    """The test database as the workers reach it; first, before any row is made."""
    with database_for_workers(tmp_path) as url:
        yield url


@pytest.fixture
def broker():
    """Send this process's jobs to Redis (database 14, emptied) instead of running them eagerly."""
    with jobs_to_redis(REDIS_URL) as queue:
        yield queue


class Lander(Worker):
    """A worker of the real site taking ``land``, whose log tells what its jobs did."""

    def results(self) -> list[dict]:
        """What each lander's job this worker finished returned (its log is JSON lines)."""
        found = []
        for line in self.log_path.read_bytes().splitlines():
            with contextlib.suppress(ValueError):
                match = RESULT.search(json.loads(line).get("message", "").encode())
                if match:
                    found.append(ast.literal_eval(match.group(1).decode()))
        return found

    def ended(self) -> int:
        """How many lander's jobs this worker finished, returning or raising."""
        return len(ENDED.findall(self.log_path.read_bytes()))


@pytest.fixture
def start_workers(database, broker, settings, tmp_path):
    """``start_workers(n)``: n workers on ``land``, ready when it returns them; every one
    is stopped at the end."""
    workers = []
    env = {
        "CELERY_TRACE_LOG_LEVEL": "INFO",  # each job's result, in the worker's log
        "FACTORY_RUNNER_ROOT": str(settings.FACTORY_RUNNER_ROOT),
        "FACTORY_RUNNER_UID": str(SANDBOX_UID),
    }

    def start(count: int = 1, **extra: str) -> list[Lander]:
        started = []
        for _ in range(count):
            log_path = tmp_path / f"lander{len(workers)}.log"
            started.append(
                Lander(
                    "land",
                    log_path=log_path,
                    broker_url=REDIS_URL,
                    database_url=database,
                    media_root=settings.MEDIA_ROOT,
                    default_queue=broker,
                    name=f"test-{log_path.stem}@%h",
                    env={**env, **extra},
                )
            )
            workers.append(started[-1])
        wait_for(lambda: all(w.ready() for w in started), 60, "the workers to start")
        return started

    try:
        yield start
    finally:
        for worker in workers:
            worker.stop()


@pytest.fixture
def queued(broker, queue, flow):
    """Two approved changes queued to land, alpha then beta, and no job sent for them yet
    (the approvals' wake-ups go to Redis, not run here, and are dropped: each test sends
    the jobs it means)."""
    tasks = [
        queue.approved(feature(name), branch=name, title=f"Add {name}")[0]
        for name in ("alpha", "beta")
    ]
    redis.Redis.from_url(REDIS_URL).flushdb()
    return tasks


def hold_pushes(origin, hook: str, folder: Path) -> tuple[Path, Path]:
    """Make the origin's ``hook`` hold every push to main: it creates ``held``, then waits
    until ``release`` exists (30 s at most). Other pushes pass at once."""
    held, release = folder / "held", folder / "release"
    script = origin.bare / "hooks" / hook
    script.write_text(
        "#!/bin/sh\n"
        "grep -q ' refs/heads/main$' || exit 0\n"
        f"touch '{held}'\n"
        "i=0\n"
        f"while [ ! -e '{release}' ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done\n"
    )
    script.chmod(0o755)
    return held, release


def lander_held_in(hook: str, flow, origin, start_workers, folder: Path):
    """A lander started on the queue, its push held in the origin's ``hook``: its worker,
    and the file whose creation lets the push go on."""
    held, release = hold_pushes(origin, hook, folder)
    (worker,) = start_workers()
    land_job.delay(flow.project.pk)
    wait_for(held.exists, 30, f"the push to reach the origin's {hook} hook")
    return worker, release


def slow_verify(flow, seconds: int) -> None:
    project_services.project_update(
        project=flow.project,
        actor=flow.manager,
        verify={**VERIFY, "test": f"sleep {seconds}; python3 run_tests.py"},
    )


def sandboxes_running(runner_root: Path) -> int:
    """How many sandboxes (mount namespaces) run processes of the sandbox's user with this
    test's runner root mounted."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            status = (entry / "status").read_text()
            uids = next(line.split()[1:] for line in status.splitlines() if line[:4] == "Uid:")
            if str(SANDBOX_UID) in uids and str(runner_root) in (entry / "mountinfo").read_text():
                found.add(os.readlink(entry / "ns" / "mnt"))
        except (OSError, StopIteration):  # not a process, gone, or a zombie
            continue
    return len(found)


def sandbox_running(runner_root: Path) -> bool:
    return sandboxes_running(runner_root) > 0


def batch_state() -> str:
    return Batch.objects.get().state


def wake_and_finish(start_workers) -> dict:
    """What production does after a lander dies: the reconciler wakes the lander, and a
    worker (a new one) finishes the queue."""
    counts = reconciler.reconcile()
    (worker,) = start_workers()
    wait_for(lambda: worker.ended() == 1, 60, "the woken lander's job to end")
    return counts


def assert_landed_once(origin, tasks) -> None:
    """Each task is done at its own commit, which main passed once, in approval order; one
    ``land`` event each; main only ever fast-forwarded; no batch left active."""
    commits = origin.first_parents(origin.base)
    assert [origin.message(c).split(":")[0] for c in commits] == [t.key for t in tasks]
    for task, commit in zip(tasks, commits, strict=True):
        task.refresh_from_db()
        assert (task.state, task.landed_commit) == ("done", commit)
        assert Event.objects.filter(task=task, transition="land").count() == 1
    moves = origin.reflog_moves()
    assert moves and moves[-1][1] == origin.tip()
    for old, new in moves:
        assert origin._git(origin.bare, "merge-base", "--is-ancestor", old, new) == ""
    assert not Batch.objects.filter(state__in=ACTIVE_BATCH_STATES).exists()


def test_a_lander_killed_mid_verify_leaves_its_changes_queued_and_the_next_lands_each_once(
    queued, flow, origin, start_workers, settings
):
    slow_verify(flow, 25)
    (first,) = start_workers()
    land_job.delay(flow.project.pk)
    wait_for(lambda: sandbox_running(settings.FACTORY_RUNNER_ROOT), 30, "the verify run")
    assert batch_state() == "verifying"

    first.kill()
    wait_for(lambda: not sandbox_running(settings.FACTORY_RUNNER_ROOT), 10, "the sandbox to die")
    project_services.project_update(project=flow.project, actor=flow.manager, verify=VERIFY)
    counts = wake_and_finish(start_workers)

    assert counts["landers_woken"] == 1
    dead, second = Batch.objects.order_by("pk")
    assert (dead.state, dead.reason, dead.pushes) == ("abandoned", STOPPED_BEFORE, 0)
    assert (second.state, second.base) == ("landed", origin.base)
    assert_landed_once(origin, queued)
    assert len(origin.reflog_moves()) == 1


def test_a_lander_killed_during_its_runs_ahead_leaves_no_sandbox_and_the_next_lands_each_once(
    queued, flow, origin, start_workers, settings
):
    """With room for parallel verification, the lander verifies the chain and, beside it,
    the trees a bisection would need next; killed then, none of its sandboxes outlives it."""
    slow_verify(flow, 25)
    (first,) = start_workers(FACTORY_LANDING_VERIFY_PARALLEL="4")
    land_job.delay(flow.project.pk)
    root = settings.FACTORY_RUNNER_ROOT
    wait_for(lambda: sandboxes_running(root) == 3, 30, "the chain's run and the two ahead")

    first.kill()
    # Three sandboxes end through bubblewrap's --die-with-parent: slower on a busy machine.
    wait_for(lambda: not sandbox_running(root), 30, "every sandbox to die")
    project_services.project_update(project=flow.project, actor=flow.manager, verify=VERIFY)
    wake_and_finish(start_workers)

    dead, second = Batch.objects.order_by("pk")
    assert (dead.state, dead.reason, dead.pushes) == ("abandoned", STOPPED_BEFORE, 0)
    # The chain's run and, ahead, its first change alone and the target alone: each counted
    # as it started.
    assert dead.verify_runs == 3
    assert second.state == "landed"
    assert_landed_once(origin, queued)


def test_a_lander_killed_before_its_push_reached_the_origin_lands_on_the_next_run(
    queued, flow, origin, start_workers, tmp_path
):
    first, release = lander_held_in("pre-receive", flow, origin, start_workers, tmp_path)
    assert batch_state() == "pushing"

    first.kill()
    # The push runs in a session of its own (landing.git.push): a crash of the whole machine
    # takes it too, before the origin's hook let it through. Main stays put.
    subprocess.run(["pkill", "-KILL", "-f", str(origin.bare)], check=False)
    assert origin.tip() == origin.base
    release.touch()
    wake_and_finish(start_workers)

    dead, second = Batch.objects.order_by("pk")
    assert (dead.state, dead.reason, dead.pushes) == ("abandoned", STOPPED_BEFORE, 1)
    assert (second.state, second.result) == ("landed", origin.tip())
    assert_landed_once(origin, queued)
    assert len(origin.reflog_moves()) == 1


def test_a_lander_killed_after_its_push_reached_the_origin_is_settled_from_git(
    queued, flow, origin, start_workers, tmp_path
):
    first, release = lander_held_in("post-receive", flow, origin, start_workers, tmp_path)
    pushed = Batch.objects.get()

    first.kill()  # main has moved already; the lander never heard it
    assert (pushed.state, origin.tip()) == ("pushing", pushed.result)
    assert [Task.objects.get(pk=t.pk).state for t in queued] == ["approved", "approved"]
    release.touch()
    wake_and_finish(start_workers)

    settled = Batch.objects.get()  # no second batch: nothing was built or pushed again
    assert (settled.state, settled.reason, settled.pushes) == ("landed", STOPPED_AFTER, 1)
    assert_landed_once(origin, queued)
    assert len(origin.reflog_moves()) == 1


def test_a_lander_killed_while_the_origin_holds_its_ref_locks_leaves_none_behind(
    queued, flow, origin, start_workers, tmp_path
):
    # reference-transaction "prepared": the origin's receive-pack holds main's lock (and
    # HEAD's) here. Killed with the lander, it would leave them, and every push after refused.
    first, release = lander_held_in("reference-transaction", flow, origin, start_workers, tmp_path)

    first.kill()
    release.touch()
    wake_and_finish(start_workers)

    settled = Batch.objects.get()
    assert (settled.state, settled.reason, settled.pushes) == ("landed", STOPPED_AFTER, 1)
    assert_landed_once(origin, queued)
    assert sorted(p.name for p in origin.bare.rglob("*.lock")) == []


def test_a_job_delivered_twice_at_once_lands_each_change_once(
    queued, flow, origin, start_workers, tmp_path
):
    held, release = hold_pushes(origin, "pre-receive", tmp_path)
    workers = start_workers(2)

    land_job.delay(flow.project.pk)
    land_job.delay(flow.project.pk)
    wait_for(held.exists, 30, "one lander to reach the push")
    wait_for(lambda: sum(len(w.results()) for w in workers) == 1, 30, "the other job to end")
    release.touch()
    wait_for(lambda: sum(len(w.results()) for w in workers) == 2, 30, "the lander to finish")

    results = sorted((r for w in workers for r in w.results()), key=lambda r: "busy" in r)
    assert results == [
        {"batches": 1, "landed": 2, "returned": 0, "settled": 0},
        {"batches": 0, "landed": 0, "returned": 0, "settled": 0, "busy": True},
    ]
    assert [len(w.results()) for w in workers] == [1, 1]  # one delivery each, at once
    assert Batch.objects.count() == 1
    assert_landed_once(origin, queued)
