"""Starting Celery jobs, by the name they are registered under.

Services start the jobs they need once their transaction commits, and jobs call services.
A service names a job (its dotted path, the name the broker carries) rather than
importing it, so an app's services and jobs never import each other.
"""

from celery import current_app
from django.db import transaction


def enqueue(name: str, *args, countdown: float | None = None) -> None:
    """Send the job registered as ``name`` (``"evidence.jobs.gate_run_job"``) now."""
    if name not in current_app.tasks:
        # A web process has not imported the apps' jobs.py yet: do what a worker does at start.
        current_app.loader.import_default_modules()
    current_app.tasks[name].apply_async(args, countdown=countdown)


def enqueue_on_commit(name: str, *args) -> None:
    """Send the job once the current transaction commits (never, if it rolls back)."""
    transaction.on_commit(lambda: enqueue(name, *args))
