"""One lander per project (landing.locks, ADR 0023), directly and behind a real PgBouncer
in transaction mode: a second lander stops at once, a killed lander's lock goes with it,
and a lander that lost its lock pushes nothing."""

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from django.db import connection, connections

from landing import verifying
from landing.lander import land
from landing.locks import LOCK_SPACE, LockLost, ensure_held, lander_alive, lander_lock
from landing.models import Batch
from tests.conftest import postgres_only
from tests.landing.conftest import feature
from tests.pgbouncer import behind, pgbouncer
from tests.workers import wait_for

ROOT = Path(__file__).resolve().parents[2]
# A lander in a process of its own: it takes the lock, says so, and holds it till killed.
HOLD = """
import sys, time
import django
django.setup()
from landing.locks import lander_lock
with lander_lock(int(sys.argv[1])) as held:
    print("held", held, flush=True)
    time.sleep(120)
"""


class Lander(threading.Thread):
    """A lander in a thread of its own (so its own connections): takes the project's
    lock, notes whether it got it, and holds it until ``stop()``."""

    def __init__(self, project_id: int):
        super().__init__(daemon=True)
        self.project_id, self.held = project_id, None
        self.entered, self.leave = threading.Event(), threading.Event()
        self.start()
        assert self.entered.wait(30), "the lander did not take its turn at the lock"

    def run(self):
        try:
            with lander_lock(self.project_id) as held:
                self.held = held
                self.entered.set()
                self.leave.wait(30)
        finally:
            self.entered.set()
            connections.close_all()  # this thread's own

    def stop(self):
        self.leave.set()
        self.join(30)


def lock_holders(project_id: int) -> list[int]:
    """The server processes holding the project's lander lock, read on the server itself."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid::bigint = %s"
            " AND objid::bigint = %s AND objsubid = 2 AND granted"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            [LOCK_SPACE, project_id],
        )
        return [row[0] for row in cursor.fetchall()]


def test_a_second_lander_finds_the_lock_held_and_the_first_lets_go(db):
    first = Lander(1)
    second = Lander(1)
    second.stop()
    first.stop()
    third = Lander(1)
    third.stop()

    assert (first.held, second.held, third.held) == (True, False, True)


@postgres_only
def test_behind_a_transaction_pooler_a_second_lander_finds_the_lock_held(db):
    # Two server connections: the first lander's lock keeps one for as long as it lands.
    with pgbouncer(pool_size=2) as pooler, behind(pooler):
        first = Lander(2)
        second = Lander(2)
        second.stop()
        first.stop()

    assert (first.held, second.held) == (True, False)


@postgres_only
def test_behind_a_transaction_pooler_a_lander_killed_with_sigkill_leaves_no_lock(db):
    with pgbouncer(pool_size=2) as pooler, behind(pooler):
        killed = subprocess.Popen(
            [sys.executable, "-c", HOLD, "3"],
            cwd=ROOT,
            env={
                **os.environ,
                "DJANGO_SETTINGS_MODULE": "factory_site.settings_test",
                "DATABASE_URL": pooler.url,
            },
            stdout=subprocess.PIPE,
            text=True,
        )
        with killed.stdout:
            assert killed.stdout.readline() == "held True\n"
        assert len(lock_holders(3)) == 1

        os.kill(killed.pid, signal.SIGKILL)
        killed.wait(30)
        wait_for(lambda: lock_holders(3) == [], 10, "the killed lander's lock to be freed")
        next_one = Lander(3)
        next_one.stop()

    assert next_one.held is True
    assert lock_holders(3) == []


def test_lander_alive_says_whether_any_lander_holds_the_project(db):
    before = lander_alive(4)
    holder = Lander(4)
    during = lander_alive(4)
    holder.stop()

    assert (before, during, lander_alive(4)) == (False, True, False)


def test_a_process_holds_the_lock_only_inside_lander_lock(db):
    with lander_lock(5) as held:
        ensure_held(5)
    with pytest.raises(LockLost):
        ensure_held(5)

    assert held is True


@postgres_only
def test_a_held_lock_holds_no_transaction_id_and_no_snapshot(db):
    # The lock's transaction stays open while the sandbox verifies, for many minutes:
    # it must not hold back vacuum (no xid, no xmin), nor be ended by an idle timeout.
    holder = Lander(6)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT state, backend_xid, backend_xmin FROM pg_stat_activity WHERE pid = %s",
            lock_holders(6),
        )
        activity = cursor.fetchone()
    holder.stop()

    assert activity == ("idle in transaction", None, None)


@pytest.fixture
def lock_lost_while_verifying(flow, monkeypatch):
    """The lander's lock connection is cut right after each verify run, as a pooler's
    restart, a failover or an administrator would; calling the fixture stops that."""
    verify = verifying.verify_tree

    def verify_then_lose_the_lock(**kwargs):
        result = verify(**kwargs)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s, 10000)", lock_holders(flow.project.pk))
        return result

    monkeypatch.setattr(verifying, "verify_tree", verify_then_lose_the_lock)
    return lambda: monkeypatch.setattr(verifying, "verify_tree", verify)


@postgres_only
def test_a_lander_that_lost_its_lock_before_the_push_pushes_nothing(
    queue, origin, flow, lock_lost_while_verifying
):
    task, _ = queue.approved(feature("alpha"), branch="alpha")

    counts = land(flow.project)

    task.refresh_from_db()
    assert (counts["lock_lost"], counts["landed"]) == (True, 0)
    assert origin.tip() == origin.base
    assert (task.state, Batch.objects.get().state) == ("approved", "pushing")
    assert lock_holders(flow.project.pk) == []


@postgres_only
def test_after_a_lost_lock_the_next_lander_settles_the_batch_and_lands_the_change(
    queue, origin, flow, lock_lost_while_verifying
):
    task, _ = queue.approved(feature("alpha"), branch="alpha")
    assert land(flow.project)["lock_lost"] is True
    lock_lost_while_verifying()

    counts = land(flow.project)

    task.refresh_from_db()
    assert (counts["settled"], counts["landed"]) == (1, 1)
    assert [b.state for b in Batch.objects.order_by("pk")] == ["abandoned", "landed"]
    assert (task.state, origin.first_parents(origin.base)) == ("done", [task.landed_commit])
