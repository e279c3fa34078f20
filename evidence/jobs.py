"""Celery jobs for gates. Thin: load by id, call one service.

Every job is idempotent (re-running it once its result is stored changes nothing),
acknowledged late and re-queued if its worker dies, so a killed worker loses nothing.
Services start it by name (``projects.queue``).
"""

import logging

from celery import shared_task
from django.conf import settings

from evidence import services
from evidence.models import GateRun

JOB_OPTIONS = {"acks_late": True, "reject_on_worker_lost": True, "ignore_result": True}

log = logging.getLogger(__name__)


def execute_logged(run: GateRun, job: str, logger: logging.Logger = log) -> GateRun:
    """Run the gate (``services.gate_run_execute``) between a line at its start and one
    with its verdict: the two lines a request id is followed through a job by."""
    where = {"job": job, "gate": run.gate, "run": run.pk, "attempt": run.attempt_id}
    logger.info("%s started: gate %s, run %s", job, run.gate, run.pk, extra=where)
    run = services.gate_run_execute(run=run)
    # The summary (which may quote the agent's own text) only as a field, never in the line.
    logger.info(
        "%s ended: gate %s, run %s is %s",
        job,
        run.gate,
        run.pk,
        run.state,
        extra={**where, "state": run.state, "summary": run.summary[:500]},
    )
    return run


@shared_task(
    **JOB_OPTIONS,
    soft_time_limit=settings.FACTORY_GATE_TIME_LIMIT,
    time_limit=settings.FACTORY_GATE_TIME_LIMIT + 30,
)
def gate_run_job(run_id: int) -> None:
    run = GateRun.objects.filter(pk=run_id).first()
    if run is not None:
        execute_logged(run, "gate job")
