"""The runner's Celery job, on a queue of its own (``verify``).

Runners can live on other machines than gate workers: ``CELERY_TASK_ROUTES`` sends this
job to the queue ``verify``, and a worker started with ``-Q verify`` takes only these. Like every gate job it is idempotent per gate run
(one runner result per attempt), acknowledged late and re-queued if its worker dies.
"""

import logging

from celery import shared_task
from django.conf import settings

from evidence.jobs import JOB_OPTIONS, execute_logged
from evidence.models import GateRun
from runner.mirror import sweep

log = logging.getLogger(__name__)


@shared_task(
    **JOB_OPTIONS,
    soft_time_limit=settings.FACTORY_RUNNER_TIME_LIMIT,
    time_limit=settings.FACTORY_RUNNER_TIME_LIMIT + 30,
)
def verify_job(run_id: int) -> None:
    # Workspaces are local to the runner's machine: each runner sweeps what a killed
    # runner left here (the reconciler sweeps only where it runs).
    sweep(older_than=settings.FACTORY_RUNNER_TIME_LIMIT + settings.FACTORY_GATE_GRACE_SECONDS)
    run = GateRun.objects.filter(pk=run_id).first()
    if run is not None:
        execute_logged(run, "runner job", log)
