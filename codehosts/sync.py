"""Keeping the site and the host in step: acting on kept deliveries, and asking the host
for what webhooks missed.

``delivery_process`` acts on one kept delivery by reading the object it names again from
the host (the payload's state is never trusted: it is unsigned news of a change, possibly
old, duplicated or reordered) and then bringing the host up to the database's truth
(``codehosts.pulls.pull_request_sync``, which takes a person's push as their attempt); an issue's delivery re-reads the issue and
brings its task in step (``codehosts.issues``). ``hosts_reconcile`` does the same for the
tasks whose state changed since the host last showed it, a bounded number per tick, and
asks the host for the labelled issues deliveries missed.
``deliveries_prune`` deletes kept deliveries past their retention.
"""

import contextlib
import logging
import re
from datetime import timedelta

from django.conf import settings
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone

from codehosts import issues
from codehosts.line_comments import line_comment_replies_sync, line_comments_post_pending
from codehosts.models import HostDelivery
from codehosts.providers import HostError, NotFound, provider_for
from codehosts.pulls import pull_request_closed, pull_request_reopened, pull_request_sync
from projects.models import Project
from tasks.models import Attempt, LineComment, Task, TaskState

logger = logging.getLogger(__name__)

# The deliveries about a pull request that the site acts on.
PULL_REQUEST_EVENTS = ("pull_request", "pull_request_review_comment")
MARKER = re.compile(r"<!-- factory-memory:task ([A-Za-z0-9_-]{1,32}) -->")


def delivery_process(*, delivery_id: int, host=None) -> HostDelivery | None:
    """Act on one kept delivery once, and record what came of it on the delivery.

    A delivery already processed is left as it is (a duplicate job). A pull request's
    delivery re-reads that pull request from the project's host and acts only when its
    body carries the marker of a task of that project; the task's pull request is then
    synced from the database. Raises ``HostError`` after recording it in ``error``
    (``processed_at`` stays empty, so the sweep tries again).
    """
    delivery = HostDelivery.objects.select_related("project").filter(pk=delivery_id).first()
    if delivery is None or delivery.processed_at is not None:
        return delivery
    try:
        result = _act(delivery, host)
    except HostError as exc:
        HostDelivery.objects.filter(pk=delivery.pk).update(error=exc.detail[:2000])
        raise
    delivery.processed_at, delivery.result, delivery.error = timezone.now(), result[:200], ""
    delivery.save(update_fields=["processed_at", "result", "error"])
    return delivery


def _act(delivery: HostDelivery, host) -> str:
    project = delivery.project
    if (project.code_host or {}).get("provider", "none") == "none":
        return "the project no longer has a code host"
    if delivery.event == "issues" and isinstance(delivery.subject.get("issue"), int):
        # The issue as the host has it now: the payload's labels and text are not taken.
        return issues.issue_sync(project=project, number=delivery.subject["issue"], host=host)
    number = delivery.subject.get("pull_request")
    if delivery.event not in PULL_REQUEST_EVENTS or not isinstance(number, int):
        return f"nothing to do for {delivery.event}"
    host = host or provider_for(project)
    try:
        pull = host.pull_request(number)  # the host's word now, not the payload's
    except NotFound:
        return f"pull request #{number} is not on the host"
    found = MARKER.search(pull.body or "")
    task = Task.objects.filter(project=project, key=found.group(1)).first() if found else None
    if task is None:
        return f"pull request #{number} is no task's of {project.slug}"
    if delivery.event == "pull_request_review_comment":
        # A reply on the host to a reviewer's line comment (or a comment of its own).
        return line_comment_replies_sync(task=task, pull=pull, host=host)
    if pull.state == "closed":
        # Closed by hand, or by its branch being deleted: a person withdrew the work.
        # Merged: nothing withdrawn; either way the site does not open it again.
        return pull_request_closed(task=task, pull=pull, host=host)
    if pull.state == "open":
        pull_request_reopened(task=task, number=number)
    # A head a person pushed becomes their attempt there (codehosts.pushes).
    return pull_request_sync(task_id=task.pk, host=host)


def deliveries_prune(*, now=None) -> int:
    """Delete deliveries kept longer than ``FACTORY_CODE_HOST_DELIVERY_KEEP_DAYS``."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.FACTORY_CODE_HOST_DELIVERY_KEEP_DAYS)
    deleted, _ = HostDelivery.objects.filter(received_at__lt=cutoff).delete()
    return deleted


def hosts_reconcile(*, limit: int | None = None) -> dict:
    """Bring the host up to the database for the tasks it does not show yet, at most
    ``limit`` (``FACTORY_CODE_HOST_RECONCILE_MAX``) per call, the longest waiting first;
    retry deliveries whose processing failed. One task's failure is logged and the loop
    moves on: no task or host stops the others."""
    limit = settings.FACTORY_CODE_HOST_RECONCILE_MAX if limit is None else limit
    # Exists, not a join over attempts: one row per task, and no DISTINCT beside ORDER BY.
    branched = Attempt.objects.filter(task=OuterRef("pk"), change__has_key="branch")
    due = (
        Task.objects.filter(project__code_host__provider="github")
        .filter(Exists(branched))
        .exclude(state__in=[TaskState.DRAFT, TaskState.CANCELLED])
        .filter(Q(pull_request__isnull=True) | Q(updated_at__gt=F("pull_request__synced_at")))
        .order_by("updated_at", "id")
        .values_list("pk", flat=True)[:limit]
    )
    counts = {"pull_requests_synced": 0, "pull_requests_failed": 0, "deliveries_retried": 0}
    for task_id in list(due):
        try:
            pull_request_sync(task_id=task_id)
            counts["pull_requests_synced"] += 1
        except HostError as exc:
            logger.warning(
                "task %s: the host could not be brought up to date: %s", task_id, exc.detail
            )
            counts["pull_requests_failed"] += 1
    # Line comments whose own job found no pull request then, or gave up on the host: those
    # on the current attempt of a task still under review or approved.
    commented = LineComment.objects.filter(attempt=OuterRef("current_attempt"))
    reviewed = (
        Task.objects.filter(project__code_host__provider="github", pull_request__isnull=False)
        .filter(state__in=[TaskState.IN_REVIEW, TaskState.APPROVED])
        .filter(Exists(commented))
        .order_by("updated_at", "id")
        .values_list("pk", flat=True)[:limit]
    )
    counts |= {"line_comments_posted": 0, "line_comments_failed": 0}
    for task_id in list(reviewed):
        try:
            counts["line_comments_posted"] += len(line_comments_post_pending(task_id=task_id))
        except HostError as exc:
            logger.warning("task %s: a line comment could not be posted: %s", task_id, exc.detail)
            counts["line_comments_failed"] += 1
    counts |= {"issues_created": 0, "issues_read": 0, "issues_left": 0, "issues_failed": 0}
    # Issues followed by label: what deliveries missed, read from the host (pages followed).
    following = Project.objects.filter(code_host__provider="github").exclude(code_host__issues=None)
    for project in following.order_by("pk"):
        if issues.label_of(project) is None:
            continue
        try:
            found = issues.issues_reconcile(project=project, limit=limit)
        except HostError as exc:
            logger.warning("%s: the host's issues could not be read: %s", project.slug, exc.detail)
            counts["issues_failed"] += 1
            continue
        for name, count in found.items():
            counts[name] += count
    stale = HostDelivery.objects.filter(processed_at__isnull=True).order_by("received_at")
    for delivery_id in list(stale.values_list("pk", flat=True)[:limit]):
        # A failure is recorded on the delivery; the next tick tries again.
        with contextlib.suppress(HostError):
            delivery_process(delivery_id=delivery_id)
        counts["deliveries_retried"] += 1
    return counts
