"""A PgBouncer of a test's own, in transaction mode, in front of the test database's server.

Debian's ``pgbouncer`` (``make test`` installs it; without it these tests are skipped),
started with its own configuration in a temporary folder and listening only on a Unix
socket there, so tests side by side never share a pooler or a port; never the system's
service. ``behind(pooler)`` points Django's connections that open from then on (each
thread's own, the lander's lock, the stream's listener) at it: the connection the test
thread already has stays direct, to arrange and inspect the server.
"""

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from django.db import connection

from tests.workers import wait_for


class PgBouncer:
    """A running PgBouncer: ``host`` (its socket's folder) and ``port`` to connect to."""

    port = 6432

    def __init__(self, folder: Path, process: subprocess.Popen, log: Path):
        self.host, self.process, self.log = str(folder), process, log

    @property
    def url(self) -> str:
        """The test database through this pooler, as another process's ``DATABASE_URL``."""
        db = connection.settings_dict
        return f"postgres://{db['USER']}@{quote(self.host, safe='')}:{self.port}/{db['NAME']}"

    def connect(self, **kwargs) -> psycopg.Connection:
        db = connection.settings_dict
        return psycopg.connect(
            host=self.host, port=self.port, dbname=db["NAME"], user=db["USER"], **kwargs
        )


def _answers(pooler: PgBouncer) -> bool:
    if pooler.process.poll() is not None:
        raise AssertionError(f"pgbouncer stopped: {pooler.log.read_text()}")
    try:
        pooler.connect(autocommit=True).close()
    except psycopg.OperationalError:
        return False
    return True


@contextlib.contextmanager
def pgbouncer(*, pool_size: int = 2):
    """Start a PgBouncer with ``pool_mode = transaction`` and at most ``pool_size`` server
    connections per database; yield it; stop it and remove its folder."""
    if shutil.which("pgbouncer") is None:
        pytest.skip("pgbouncer is not installed (`make test` installs Debian's package)")
    db = connection.settings_dict
    # Short: a Unix socket's path has room for about a hundred characters.
    folder = Path(tempfile.mkdtemp(prefix="pgb-"))
    (folder / "users.txt").write_text(f'"{db["USER"]}" ""\n')
    (folder / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={db['HOST'] or '127.0.0.1'} port={db['PORT'] or 5432}\n"
        "[pgbouncer]\n"
        "listen_addr =\n"
        f"unix_socket_dir = {folder}\n"
        f"listen_port = {PgBouncer.port}\n"
        "auth_type = trust\n"
        f"auth_file = {folder / 'users.txt'}\n"
        "pool_mode = transaction\n"
        f"default_pool_size = {pool_size}\n"
        "server_round_robin = 0\n"  # the default: the server connection used last goes next
        "ignore_startup_parameters = extra_float_digits\n"
    )
    command = ["pgbouncer", str(folder / "pgbouncer.ini")]
    if os.geteuid() == 0:  # PgBouncer refuses to run as root
        nobody = pwd.getpwnam("nobody")
        for path in (folder, *folder.iterdir()):
            os.chown(path, nobody.pw_uid, nobody.pw_gid)
        command[1:1] = ["-u", "nobody"]
    log = Path(tempfile.mkstemp(prefix="pgb-", suffix=".log")[1])
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    pooler = PgBouncer(folder, process, log)
    try:
        wait_for(lambda: _answers(pooler), 20, "pgbouncer to answer", every=0.05)
        yield pooler
    finally:
        process.terminate()
        process.wait(10)
        shutil.rmtree(folder, ignore_errors=True)
        log.unlink(missing_ok=True)


@contextlib.contextmanager
def behind(pooler: PgBouncer):
    """Django's connections opened from now on go through ``pooler``."""
    db = connection.settings_dict  # the one dict every thread's connection is made from
    saved = db["HOST"], db["PORT"]
    db["HOST"], db["PORT"] = pooler.host, pooler.port
    try:
        yield
    finally:
        db["HOST"], db["PORT"] = saved
