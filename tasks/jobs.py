"""Celery jobs for attempts, the reconciler and the housekeeping. Thin: load by id, call
one service.

Idempotent, acknowledged late and re-queued if a worker dies, like every job here.
"""

from celery import shared_task

from evidence.jobs import JOB_OPTIONS
from tasks import attempts, reconciler
from tasks.models import Attempt


@shared_task(**JOB_OPTIONS)
def attempt_conclude_job(attempt_id: int) -> None:
    attempt = Attempt.objects.filter(pk=attempt_id).first()
    if attempt is not None:
        attempts.attempt_checks_conclude(attempt=attempt)


@shared_task(**JOB_OPTIONS)
def reconcile_job() -> dict:
    return reconciler.reconcile()


@shared_task(**JOB_OPTIONS)
def housekeeping_job() -> dict:
    return reconciler.housekeeping()
