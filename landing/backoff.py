"""What a project's lander remembers of a batch that erred, and when it looks again (ADR 0020).

A batch ends ``error`` when nothing can be decided about its changes: the target fails
its tests on its own, the repository cannot be reached, the sandbox is missing, an error
nobody foresaw. Woken again at once (the reconciler wakes every project with queued work
every tick), it would verify the same trees and fail the same way, for ever. So the
lander remembers the failure by (the target's tip, the change first in the queue):

- ``resting``: asked first at every wake-up, from the database alone (no git, no
  sandbox): while backing off, with the same head and before ``wake_at``, it stops there;
- ``holds``: once it has fetched, the same tip and head as a batch that verified stop it
  too (at most one verification per tip and head), and the next look is twice as late;
  after the machine's trouble (nothing verified) it tries again once ``wake_at`` passed;
- ``record``: a batch erred: back off (an Event the first time for a tip and head);
- ``forget``: a batch landed or came back, or nothing is queued: ready again (an Event).

A manager wakes it sooner with ``landing.services.landing_retry``.
"""

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from landing.models import ACTIVE_BATCH_STATES, Batch, Lander, LanderState
from projects.fsm import fire
from projects.models import Project
from tasks.landing import landing_queue
from tasks.models import Attempt


def delay(looks: int) -> timedelta:
    """How long the lander waits before its next look, after ``looks`` that changed nothing."""
    seconds = settings.FACTORY_LANDING_BACKOFF_SECONDS * 2 ** min(looks, 20)
    return timedelta(seconds=min(seconds, settings.FACTORY_LANDING_BACKOFF_MAX_SECONDS))


def backing_off(project: Project) -> Lander | None:
    """The project's lander if it is backing off, else None."""
    return (
        Lander.objects.filter(project=project, state=LanderState.BACKING_OFF)
        .select_related("head__task", "batch")
        .first()
    )


def resting(project: Project, *, now: datetime | None = None) -> bool:
    """Whether a wake-up should stop before it takes the lock or fetches: backing off, the
    queue's head unchanged, before ``wake_at``, and no dead lander's batch to settle."""
    lander = Lander.objects.filter(project=project, state=LanderState.BACKING_OFF).first()
    if lander is None or lander.wake_at is None or lander.wake_at <= (now or timezone.now()):
        return False
    head = landing_queue(project.pk).values_list("pk", flat=True).first()
    if head != lander.head_id:
        return False
    return not Batch.objects.filter(project=project, state__in=ACTIVE_BATCH_STATES).exists()


def holds(project: Project, *, tip: str | None, head: Attempt) -> bool:
    """Whether the lander, having fetched the target's ``tip``, must not build a batch for
    ``head`` now; when so, its next look is put off twice as long as the last."""
    lander = Lander.objects.filter(project=project, state=LanderState.BACKING_OFF).first()
    if lander is None or lander.head_id != head.pk or lander.tip != (tip or ""):
        return False  # something changed: verify it
    now = timezone.now()
    if not lander.verified and (lander.wake_at is None or lander.wake_at <= now):
        return False  # nothing was verified: the machine's trouble may have passed
    # A filtered update, never ``save()``: a manager's retry meanwhile must not be undone.
    Lander.objects.filter(pk=lander.pk, state=LanderState.BACKING_OFF).update(
        looks=F("looks") + 1, wake_at=now + delay(lander.looks + 1)
    )
    return True


def record(
    project: Project,
    *,
    head: Attempt,
    tip: str,
    reason: str,
    verified: bool,
    batch: Batch | None = None,
) -> Lander:
    """A batch for ``head`` on ``tip`` erred with ``reason``: back off. The first time for a
    tip and head it is an Event (``back_off``); after that only the next look moves on."""
    now = timezone.now()
    with transaction.atomic():
        Lander.objects.get_or_create(project=project)
        lander = Lander.objects.select_for_update(no_key=True, of=("self",)).get(project=project)
        same = (
            lander.state == LanderState.BACKING_OFF
            and lander.head_id == head.pk
            and (
                lander.tip == tip
                # The target could not even be read this time: what was verified at the
                # tip it had is not forgotten for that (it would be verified again).
                or (lander.verified and not verified and not tip)
            )
        )
        if same:
            lander.looks += 1
            lander.wake_at = now + delay(lander.looks)
            lander.reason, lander.batch = reason, batch
            lander.verified = lander.verified or verified
            lander.save(update_fields=["looks", "wake_at", "reason", "batch", "verified"])
            return lander
        fire(
            lander,
            "back_off",
            actor=None,
            reason=reason[:2000],
            extra={
                "tip": tip,
                "head": head.task.key,
                "attempt": head.pk,
                "batch": batch.pk if batch is not None else None,
                "verified": verified,
            },
            tip=tip,
            head=head,
            verified=verified,
            batch=batch,
            why=reason,
            now=now,
            wake_at=now + delay(0),
        )
    return lander


def forget(project: Project, *, reason: str) -> None:
    """The queue moved on (a batch landed or came back), or nothing is queued: ready again."""
    if not Lander.objects.filter(project=project, state=LanderState.BACKING_OFF).exists():
        return
    with transaction.atomic():
        lander = Lander.objects.select_for_update(no_key=True, of=("self",)).get(project=project)
        if lander.state == LanderState.BACKING_OFF:
            fire(lander, "resume", actor=None, reason=reason)
