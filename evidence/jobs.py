"""Celery jobs for gates. Thin: load by id, call one service.

Every job is idempotent (re-running it once its result is stored changes nothing),
acknowledged late and re-queued if its worker dies, so a killed worker loses nothing.
Services start it by name (``projects.queue``).
"""

from celery import shared_task
from django.conf import settings

from evidence import services
from evidence.models import GateRun

JOB_OPTIONS = {"acks_late": True, "reject_on_worker_lost": True, "ignore_result": True}


@shared_task(
    **JOB_OPTIONS,
    soft_time_limit=settings.FACTORY_GATE_TIME_LIMIT,
    time_limit=settings.FACTORY_GATE_TIME_LIMIT + 30,
)
def gate_run_job(run_id: int) -> None:
    run = GateRun.objects.filter(pk=run_id).first()
    if run is not None:
        services.gate_run_execute(run=run)
