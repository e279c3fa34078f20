"""Celery jobs of the codehosts app: thin and idempotent, each may run again.

A host that is down or rate limiting is retried with back-off, a bounded number of
times; after that the sweep (``hosts_sweep_job``) comes back to it. A host's refusal is
logged and not retried. No job's failure reaches the change that started it.
"""

import logging

from celery import shared_task
from django.conf import settings

from codehosts import issues, line_comments, pulls, sync
from codehosts.providers import HostError, RateLimited, Unavailable
from evidence.jobs import JOB_OPTIONS

logger = logging.getLogger(__name__)


def _with_retries(job, what: str, act) -> str:
    """``act()``'s answer; a host that is down or rate limiting is tried again later with
    back-off, at most ``FACTORY_CODE_HOST_JOB_RETRIES`` times, then left to the sweep."""
    # Eager (no broker: tests, ``make run``) has nowhere to put a later try and propagates
    # Celery's Retry into the caller, so the tries are made here, at once.
    eager = bool(job.request.is_eager)
    tries = settings.FACTORY_CODE_HOST_JOB_RETRIES + 1 if eager else 1
    for _ in range(tries):
        try:
            return act()
        except (Unavailable, RateLimited) as exc:
            failed = exc
        except HostError as exc:
            logger.warning("%s: the host refused: %s", what, exc.detail)
            return f"refused: {exc.detail}"
    retries = job.request.retries or 0
    if eager or retries >= settings.FACTORY_CODE_HOST_JOB_RETRIES:
        logger.warning("%s: the host could not be reached; left to the sweep: %s", what, failed)
        return f"gave up: {failed.detail}"
    if isinstance(failed, RateLimited):
        countdown = failed.retry_after
    else:
        countdown = settings.FACTORY_CODE_HOST_BACKOFF_SECONDS * 2**retries
    raise job.retry(
        countdown=countdown, exc=failed, max_retries=settings.FACTORY_CODE_HOST_JOB_RETRIES
    )


@shared_task(bind=True, **JOB_OPTIONS)
def pull_request_sync_job(self, task_id: int) -> str:
    def act():
        synced = pulls.pull_request_sync(task_id=task_id)
        # A line comment written while the task had no pull request is posted now.
        posted = line_comments.line_comments_post_pending(task_id=task_id)
        return "; ".join([synced, *posted])

    return _with_retries(self, f"task {task_id}", act)


@shared_task(bind=True, **JOB_OPTIONS)
def line_comment_post_job(self, comment_id: int) -> str:
    return _with_retries(
        self,
        f"line comment {comment_id}",
        lambda: line_comments.line_comment_post(comment_id=comment_id),
    )


@shared_task(bind=True, **JOB_OPTIONS)
def delivery_process_job(self, delivery_id: int) -> str:
    def act():
        delivery = sync.delivery_process(delivery_id=delivery_id)
        return delivery.result if delivery is not None else "gone"

    return _with_retries(self, f"delivery {delivery_id}", act)


@shared_task(bind=True, **JOB_OPTIONS)
def issue_close_job(self, task_id: int) -> str:
    return _with_retries(self, f"task {task_id}", lambda: issues.issue_close(task_id=task_id))


@shared_task(**JOB_OPTIONS)
def hosts_sweep_job() -> dict:
    return {"deliveries_pruned": sync.deliveries_prune(), **sync.hosts_reconcile()}
