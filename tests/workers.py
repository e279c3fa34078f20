"""What the tests with real Celery workers share: sending this process's jobs to Redis
instead of running them eagerly, the database URL a worker process needs to reach the
test database, a worker process of the site, and waiting for something a worker does."""

import contextlib
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import redis
from django.db import connection
from kombu import pools as kombu_pools

from factory_site.celery import app as celery_app
from proof.workers import celery_worker


def reset_connections() -> None:
    """Forget broker connections made for the old broker URL."""
    if celery_app._pool is not None:
        celery_app._pool.force_close_all()
        celery_app._pool = None
    celery_app.amqp._producer_pool = None
    kombu_pools.reset()


@contextlib.contextmanager
def jobs_to_redis(url: str, queue: str | None = None):
    """Send this process's jobs to Redis at ``url`` (its database emptied before and after),
    on ``queue`` when given; yields the queue they go to."""
    keys = ("task_always_eager", "broker_url", "task_default_queue")
    saved = {k: celery_app.conf[k] for k in keys}
    redis.Redis.from_url(url).flushdb()
    celery_app.conf.update(task_always_eager=False, broker_url=url)
    if queue:
        celery_app.conf.update(task_default_queue=queue)
    reset_connections()
    try:
        yield celery_app.conf.task_default_queue
    finally:
        celery_app.conf.update(saved)
        reset_connections()
        redis.Redis.from_url(url).flushdb()


def database_url() -> str:
    """The test database, as a worker process's ``DATABASE_URL``."""
    db = connection.settings_dict
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


@contextlib.contextmanager
def database_for_workers(folder: Path):
    """Yield a ``DATABASE_URL`` by which worker processes reach the test database, which
    this process keeps using (a transactional test: both sides commit).

    PostgreSQL: the test database itself. SQLite: pytest-django's test database lives in
    this process's memory, where no other process reaches, so it is copied to a file in
    ``folder`` and this process works on the file until the end; then on its memory
    database again, as it was before the copy (the test's flush empties it as usual).
    """
    if connection.vendor == "postgresql":
        yield database_url()
        return
    path = folder / "workers.sqlite3"
    connection.ensure_connection()
    with contextlib.closing(sqlite3.connect(path)) as copy:
        connection.connection.backup(copy)
    # Set aside, not closed: an in-memory database lives only as long as a connection to it.
    memory, name = connection.connection, connection.settings_dict["NAME"]
    connection.connection = None
    connection.settings_dict["NAME"] = str(path)
    try:
        yield f"sqlite:///{path}"
    finally:
        connection.close()
        connection.settings_dict["NAME"] = name
        connection.connection = memory


def wait_for(condition, seconds: float, what: str, every: float = 0.2) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(every)
    raise AssertionError(f"timed out after {seconds} s waiting for {what}")


class Worker:
    """A worker process of the real site (``proof.workers.celery_worker``) taking ``queue``,
    in a session of its own, logging to ``log_path``; ``ready()`` once its log says so.

    It reaches the test database at ``database_url`` and Redis at ``broker_url``, keeps
    evidence in ``media_root``, and sends the jobs it queues to ``default_queue`` (``queue``
    unless given). ``env`` adds to or overrides the environment the module's tests need.
    """

    def __init__(
        self,
        queue: str,
        *,
        log_path: Path,
        broker_url: str,
        database_url: str,
        media_root,
        default_queue: str | None = None,
        name: str | None = None,
        env: dict | None = None,
    ):
        environment = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "factory_site.settings",
            "DATABASE_URL": database_url,
            "CELERY_BROKER_URL": broker_url,
            "CELERY_TASK_ALWAYS_EAGER": "0",
            "CELERY_QUEUE": default_queue or queue,
            "MEDIA_ROOT": str(media_root),
            **(env or {}),
        }
        self.log_path = log_path
        with open(log_path, "ab") as log:  # the process keeps its own copy
            self.process = celery_worker(
                env=environment,
                queue=queue,
                name=name or f"test-{queue}@%h",
                log=log,
                loglevel="INFO",
            )

    def ready(self) -> bool:
        return b"ready." in self.log_path.read_bytes()

    def kill(self) -> None:
        """SIGKILL the worker with its pool child and whatever its job started (its whole
        process group), as a crash or the OOM killer would."""
        with contextlib.suppress(ProcessLookupError):  # the whole group is gone already
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM, as a deploy stops it (it finishes its job first); SIGKILL after 30 s."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
