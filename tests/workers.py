"""What the tests with real Celery workers share: sending this process's jobs to Redis
instead of running them eagerly, the database URL a worker process needs to reach the
test database, and waiting for something a worker does."""

import contextlib
import time

import redis
from django.db import connection
from kombu import pools as kombu_pools

from factory_site.celery import app as celery_app


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


def wait_for(condition, seconds: float, what: str, every: float = 0.2) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(every)
    raise AssertionError(f"timed out after {seconds} s waiting for {what}")
