"""One lander at a time per project, however many runner machines take the queue (ADR 0023).

On PostgreSQL a transaction-level advisory lock, taken in a transaction the lander keeps
open, on a connection of its own, for as long as it lands. A transaction is one server
connection from its first statement to its end, directly or behind a pooler in
transaction mode (PgBouncer), so the lock and its release can never land on two server
connections, as a session lock and its unlock could there (two landers at once, or a lock
left behind on a pooled connection). The server frees it when the transaction ends: when
the lander lets go, or when its connection dies (a lander killed with SIGKILL; PgBouncer
closes a server connection whose client left mid-transaction), so a killed lander never
leaves the queue locked. The transaction writes nothing, so it has no transaction id and,
between its statements, no snapshot: it holds back no vacuum, only one server connection.

A lock lost while landing (its connection cut, its backend terminated) is found before the
push: ``ensure_held`` raises ``LockLost``, and the lander stops as a dead one would.

On SQLite (one machine by nature) an exclusive file lock beside the database, freed by the
kernel when the process dies, for the same reason.
"""

import fcntl
import hashlib
import logging
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import psycopg
from django.db import connection

from runner.mirror import root

logger = logging.getLogger(__name__)

# The advisory lock's first key: the lander's space, apart from any other lock's.
LOCK_SPACE = 0x4C414E44  # "LAND"

# The locks this process holds, by project: the lock's connection, or its file.
_held: dict[int, object] = {}


class LockLost(RuntimeError):
    """The lander no longer holds its project's lock: it must change nothing more."""


@contextmanager
def lander_lock(project_id: int) -> Iterator[bool]:
    """Yield whether this process holds the project's lander lock (never waits for it)."""
    if connection.vendor == "postgresql":
        with _transaction_lock(project_id) as held:
            yield held
        return
    with open(_lock_file(project_id), "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        _held[project_id] = handle
        try:
            yield True
        finally:
            _held.pop(project_id, None)
            fcntl.flock(handle, fcntl.LOCK_UN)


def lander_alive(project_id: int) -> bool:
    """Whether a lander, in this process or any other, holds the project's lock now."""
    if connection.vendor == "postgresql":
        # pg_locks is the server's: any connection sees it, pooled or not.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'"
                " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
                " AND classid::bigint = %s AND objid::bigint = %s AND objsubid = 2 AND granted)",
                [LOCK_SPACE, project_id],
            )
            return cursor.fetchone()[0]
    path = _lock_file(project_id)
    if not path.exists():
        return False
    with open(path) as handle:
        try:
            # Another open file: conflicts with a lock this process holds, too.
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def ensure_held(project_id: int) -> None:
    """Raise ``LockLost`` unless this process still holds the project's lander lock.

    The lander calls it just before it pushes: a lander whose lock was lost while it
    verified (another may hold it now) must not move the target."""
    held = _held.get(project_id)
    if held is None:
        raise LockLost(f"this process does not hold project {project_id}'s lander lock")
    if not isinstance(held, psycopg.Connection):
        return  # a file lock is the process's until it lets go
    try:
        with held.cursor() as cursor:
            # In the lock's own transaction, so on the server connection that holds it.
            cursor.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'"
                " AND pid = pg_backend_pid() AND classid::bigint = %s AND objid::bigint = %s"
                " AND objsubid = 2 AND granted)",
                [LOCK_SPACE, project_id],
            )
            if cursor.fetchone()[0]:
                return
    except psycopg.Error as exc:
        logger.warning("project %s's lander lost its lock: %s", project_id, exc)
        raise LockLost(f"project {project_id}'s lander lock was lost: {exc}") from exc
    raise LockLost(f"project {project_id}'s lander lock was lost")


@contextmanager
def _transaction_lock(project_id: int) -> Iterator[bool]:
    params = connection.get_connection_params()
    params.pop("context", None)
    # Parameters bound on the client, sent by the simple protocol: a statement bound on
    # the server leaves its portal, and the portal's snapshot, open until the next one,
    # and that snapshot's xmin would hold back vacuum for as long as the lander lands.
    params["cursor_factory"] = psycopg.ClientCursor
    # Never prepared: behind a transaction-mode pooler a prepared statement would stay on
    # the server connection after this transaction, for another client to trip over.
    params["prepare_threshold"] = None
    lock = psycopg.connect(**params, autocommit=False)
    try:
        with lock.cursor() as cursor:
            # SET LOCAL (set_config's third argument): only for this transaction, so
            # nothing stays on a pooled server connection. The transaction idles while the
            # sandbox runs; a timeout meant for forgotten transactions must not end it.
            cursor.execute("SELECT set_config('idle_in_transaction_session_timeout', '0', true)")
            if lock.info.server_version >= 170000:
                cursor.execute("SELECT set_config('transaction_timeout', '0', true)")
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s, %s)", [LOCK_SPACE, project_id])
            held = cursor.fetchone()[0]
        if held:
            _held[project_id] = lock
        try:
            yield held
        finally:
            if held:
                _held.pop(project_id, None)
    finally:
        # Ending the transaction frees the lock; a connection already cut freed it then.
        with suppress(psycopg.Error):
            lock.rollback()
        lock.close()


def _lock_file(project_id: int) -> Path:
    # One file per database and project: test databases side by side never share a lock.
    database = hashlib.sha256(str(connection.settings_dict["NAME"]).encode()).hexdigest()[:12]
    folder = root() / "landing"
    folder.mkdir(exist_ok=True)
    return folder / f"{database}-{project_id}.lock"
