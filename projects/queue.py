"""Starting Celery jobs, by the name they are registered under.

Services start the jobs they need once their transaction commits, and jobs call services.
A service names a job (its dotted path, the name the broker carries) rather than
importing it, so an app's services and jobs never import each other.
"""

import threading
from collections.abc import Callable
from contextlib import contextmanager

from celery import current_app
from django.conf import settings
from django.db import connections, transaction

from projects import logs


def enqueue(name: str, *args, countdown: float | None = None) -> None:
    """Send the job registered as ``name`` (``"evidence.jobs.gate_run_job"``) now.

    With Celery eager (the embedded default, no broker), a job of one of
    ``FACTORY_EAGER_BACKGROUND_QUEUES`` (the runner's ``verify``; a job may be named there
    too, as webhook tries are) runs in a thread of its own, so the request that started it answers at once, as it would with workers.
    """
    if name not in current_app.tasks:
        # A web process has not imported the apps' jobs.py yet: do what a worker does at start.
        current_app.loader.import_default_modules()
    job = current_app.tasks[name]
    queue = (current_app.conf.task_routes or {}).get(name, {}).get("queue")
    background = set(settings.FACTORY_EAGER_BACKGROUND_QUEUES)
    eager = current_app.conf.task_always_eager
    if eager and (queue in background or name in background) and not _local.foreground:
        threading.Thread(
            target=_in_background,
            args=(job, args, logs.request_id()),
            name=f"{BACKGROUND}{name}",
            daemon=True,
        ).start()
        return
    job.apply_async(args, countdown=countdown)


BACKGROUND = "factory-eager:"  # the names of the threads eager background jobs run in


class _Local(threading.local):
    foreground = False


_local = _Local()


@contextmanager
def foreground():
    """Run eager jobs in this thread, even those of the background queues: for a command
    that needs their results before it exits (``seed_demo``)."""
    _local.foreground, before = True, _local.foreground
    try:
        yield
    finally:
        _local.foreground = before


def _in_background(job, args, request_id) -> None:
    try:
        with logs.bound(request_id):  # a new thread starts with no context of its own
            job.apply(args)
    finally:
        connections.close_all()  # this thread's own connections


def enqueue_on_commit(
    name: str, *args, noting: Callable[[], None] | None = None, robust: bool = False
) -> None:
    """Send the job once the current transaction commits (never, if it rolls back).

    ``noting`` runs after the commit, just before the job is sent: for recording that it
    was sent (a gate run's ``dispatched_at``), which must stay unrecorded if it never is.
    The job carries the request id of the code that asked for it, wherever the commit runs.
    ``robust``: a job that fails where it is sent (run eagerly, in the request) is logged,
    and never turns the committed change into an error (a code host's sync: ADR 0038).
    """
    started_by = logs.request_id()

    def send():
        with logs.bound(started_by):
            if noting is not None:
                noting()
            enqueue(name, *args)

    transaction.on_commit(send, robust=robust)
