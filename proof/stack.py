"""Start and stop the production profile for a proof run, and break its parts on purpose."""

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from proof.workers import celery_worker

ROOT = Path(__file__).resolve().parent.parent
PG = os.environ.get("PROOF_PG", "postgres://postgres@127.0.0.1:5432")
REDIS_DB = int(os.environ.get("PROOF_REDIS_DB", "12"))
REDIS = f"redis://127.0.0.1:6379/{REDIS_DB}"
# Each run's database is <prefix><scenario>, dropped and made anew: a prefix of your own
# keeps two people's runs on one PostgreSQL apart.
DB_PREFIX = os.environ.get("PROOF_DB_PREFIX", "factory_proof_")
# Whether this process migrated its template database yet (``Stack.create_database``).
_template_made = False
PG_VERSION = (
    next(iter(sorted(os.listdir("/etc/postgresql"))), "15")
    if os.path.isdir("/etc/postgresql")
    else "15"
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port} after {seconds} s")


class Stack:
    """A fresh database and evidence store, with gunicorn, Celery workers and beat on them."""

    def __init__(
        self, name: str, *, web_workers: int = 4, gate_workers: int = 2, env: dict | None = None
    ):
        self.name = f"{DB_PREFIX}{name}"
        self.url = f"{PG}/{self.name}"
        self.work = Path(tempfile.mkdtemp(prefix=f"factory-proof-{name}-"))
        self.queue = f"fm-proof-{uuid.uuid4().hex[:8]}"
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.web_workers, self.gate_workers = web_workers, gate_workers
        # Every process of the stack adds up its metrics here (docs/operations.md); made
        # empty, before any of them starts.
        (self.work / "metrics").mkdir()
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "factory_site.settings",
            "DATABASE_URL": self.url,
            "DATABASE_CONN_MAX_AGE": "60",
            "CELERY_BROKER_URL": REDIS,
            "CELERY_TASK_ALWAYS_EAGER": "0",
            "CELERY_QUEUE": self.queue,
            # The production profile as docs/deploy.md has it, but over plain HTTP: the
            # agents talk to gunicorn on 127.0.0.1, with no TLS proxy in front.
            "SECRET_KEY": secrets.token_urlsafe(50),
            "CACHE_URL": REDIS,
            "SECURE_SSL_REDIRECT": "0",
            "SECURE_COOKIES": "0",
            "MEDIA_ROOT": str(self.work / "media"),
            "FACTORY_UPLOAD_TEMP_DIR": str(self.work / "uploads"),
            "STATIC_ROOT": str(self.work / "static"),
            "LOG_LEVEL": "WARNING",
            "FACTORY_RATE_USER": "1000000/min",
            "FACTORY_METRICS_TOKEN": secrets.token_urlsafe(24),
            "PROMETHEUS_MULTIPROC_DIR": str(self.work / "metrics"),
            "PYTHONPATH": str(ROOT),
            **(env or {}),
        }
        self.web = None
        self.workers: list[subprocess.Popen] = []
        self.beat = None

    # --- database ----------------------------------------------------------------------

    def create_database(self) -> None:
        """The run's database, migrated: a copy of this process's template (migrated once,
        by its first run), as ``CREATE DATABASE … TEMPLATE`` copies it in about a second
        where migrating anew takes ten."""
        import psycopg

        global _template_made
        template = f"{DB_PREFIX}template"
        with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
            if not _template_made:
                # Made anew by each process: one left by an older checkout has other migrations.
                conn.execute(f'DROP DATABASE IF EXISTS "{template}" WITH (FORCE)')
                conn.execute(f'CREATE DATABASE "{template}"')
                self.manage(
                    "migrate", "--no-input", "-v0", env={"DATABASE_URL": f"{PG}/{template}"}
                )
                _template_made = True
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{self.name}" TEMPLATE "{template}"')

    def drop(self) -> None:
        import psycopg

        with (
            contextlib.suppress(Exception),
            psycopg.connect(f"{PG}/postgres", autocommit=True) as conn,
        ):
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        # The run's queue, with whatever its workers left in it.
        subprocess.run(["redis-cli", "-n", str(REDIS_DB), "del", self.queue], capture_output=True)
        shutil.rmtree(self.work, ignore_errors=True)

    def manage(
        self, *args: str, check: bool = True, env: dict | None = None
    ) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env={**self.env, **(env or {})},
            check=check,
            capture_output=True,
            text=True,
        )

    # --- processes ----------------------------------------------------------------------

    def start(self) -> "Stack":
        self.start_web()
        for _ in range(self.gate_workers):
            self.start_worker()
        self.beat = self._spawn(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "factory_site",
                "beat",
                "--loglevel",
                "WARNING",
                "--schedule",
                str(self.work / "beat-schedule"),
            ],
            "beat",
        )
        return self

    def start_web(self) -> None:
        self.web = self._spawn(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "factory_site.wsgi",
                "--bind",
                f"127.0.0.1:{self.port}",
                "--workers",
                str(self.web_workers),
                "--timeout",
                "120",
                "--log-level",
                "warning",
                "--backlog",
                "2048",
            ],
            "web",
        )
        wait_for_port(self.port)

    def start_worker(self) -> subprocess.Popen:
        index = len(self.workers)
        log = open(self.work / f"worker{index}.log", "ab")  # noqa: SIM115 (kept for the process)
        worker = celery_worker(
            env=self.env, queue=self.queue, name=f"proof{index}-{uuid.uuid4().hex[:4]}@%h", log=log
        )
        self.workers.append(worker)
        return worker

    def _spawn(self, command: list[str], name: str) -> subprocess.Popen:
        log = open(self.work / f"{name}.log", "ab")  # noqa: SIM115 (kept open for the process)
        return subprocess.Popen(
            command,
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def kill_worker(self, worker: subprocess.Popen) -> None:
        """SIGKILL a worker and its pool children, as a crash or the OOM killer would."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)
        self.workers.remove(worker)

    def stop(self) -> None:
        for process in [self.web, self.beat, *self.workers]:
            if process is not None and process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        for process in [self.web, self.beat, *self.workers]:
            if process is not None:
                try:
                    process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)

    # --- faults on shared services ---------------------------------------------------------

    @staticmethod
    def stop_postgres() -> None:
        """``pg_ctlcluster … stop -m immediate``: every connection dies mid-flight."""
        _pg_ctlcluster("stop", "-m", "immediate")

    @staticmethod
    def start_postgres() -> None:
        _pg_ctlcluster("start")

    @staticmethod
    def flush_and_restart_redis() -> None:
        """Empty the broker's database, then restart Redis itself (it keeps nothing on disk)."""
        subprocess.run(
            ["redis-cli", "-n", str(REDIS_DB), "flushdb"], check=True, capture_output=True
        )
        subprocess.run(["redis-cli", "shutdown", "nosave"], capture_output=True)
        time.sleep(0.5)
        Path("/var/lib/redis").mkdir(parents=True, exist_ok=True)
        Path("/var/log/redis").mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                "redis-server",
                "--daemonize",
                "yes",
                "--bind",
                "127.0.0.1",
                "-::1",
                "--port",
                "6379",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                "/var/lib/redis",
                "--logfile",
                "/var/log/redis/proof.log",
            ],
            check=True,
            capture_output=True,
        )
        wait_for_port(6379)


def _pg_ctlcluster(*args: str) -> None:
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", PG_VERSION, "main", *args],
        check=True,
        capture_output=True,
    )
