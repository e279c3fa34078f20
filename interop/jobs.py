"""Celery jobs of interop. Thin and idempotent, like every job here."""

from celery import shared_task

from evidence.jobs import JOB_OPTIONS
from interop import services


@shared_task(**JOB_OPTIONS)
def imports_expire_job() -> int:
    """Run by beat (``CELERY_BEAT_SCHEDULE["imports"]``): checked imports past their time."""
    return services.imports_expire()
