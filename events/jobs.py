"""Celery jobs of the events app. Thin and idempotent: a try of a delivery that is no
longer pending, or that another worker holds, does nothing."""

from celery import shared_task

from events import services
from evidence.jobs import JOB_OPTIONS


@shared_task(**JOB_OPTIONS)
def deliver_job(delivery_id: int) -> None:
    services.delivery_try(delivery_id=delivery_id)


@shared_task(**JOB_OPTIONS)
def deliveries_due_job() -> int:
    services.deliveries_prune()
    return services.deliveries_due()
