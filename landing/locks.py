"""One lander at a time per project, however many runner machines take the queue.

On PostgreSQL a session-level advisory lock: the database holds it for the lander's
connection, and frees it when that connection ends, so a lander killed with SIGKILL
never leaves the queue locked. On SQLite (one machine by nature) an exclusive file lock
beside the database, freed by the kernel when the process dies, for the same reason.
"""

import fcntl
import hashlib
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection

from runner.mirror import root

# The advisory lock's first key: the lander's space, apart from any other lock's.
LOCK_SPACE = 0x4C414E44  # "LAND"


@contextmanager
def lander_lock(project_id: int) -> Iterator[bool]:
    """Yield whether this process holds the project's lander lock (never waits for it)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [LOCK_SPACE, project_id])
            held = cursor.fetchone()[0]
        try:
            yield held
        finally:
            if held:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [LOCK_SPACE, project_id])
        return
    # One file per database and project: test databases side by side never share a lock.
    database = hashlib.sha256(str(connection.settings_dict["NAME"]).encode()).hexdigest()[:12]
    folder = root() / "landing"
    folder.mkdir(exist_ok=True)
    with open(folder / f"{database}-{project_id}.lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
