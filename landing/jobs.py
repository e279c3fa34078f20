"""The lander's Celery job, on a queue of its own (``land``), taken by workers on runner
machines (it verifies merged trees in the runners' sandbox) that take nothing else, so a
submission's verification on ``verify`` never waits behind a lander. Thin: load the
project, call the lander. Delivered twice, or started while another lander works the
project, it finds the lock held and stops: one lander per project, and the one working
looks at the queue again before it lets go. While the lander backs off after an error
(``landing.backoff``), a wake-up is answered from the database alone.
"""

from celery import shared_task
from django.conf import settings

from evidence.jobs import JOB_OPTIONS
from landing.lander import land
from projects.models import Project


@shared_task(
    **JOB_OPTIONS,
    soft_time_limit=settings.FACTORY_LANDING_TIME_LIMIT,
    time_limit=settings.FACTORY_LANDING_TIME_LIMIT + 30,
)
def land_job(project_id: int) -> dict:
    project = Project.objects.filter(pk=project_id).first()
    return land(project) if project is not None else {}
