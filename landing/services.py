"""What a manager does to the merge queue from its faces (docs/landing.md, "Faces").

``landing_dequeue`` takes a task out of the queue (``tasks.landing.task_dequeue``), even
from a batch whose lander is gone; ``landing_retry`` wakes a lander that backs off;
``landing_pause`` and ``landing_resume`` stop and start the landing itself (``pause``);
``landing_quarantine`` puts a test in or out of quarantine (``flaky``); ``landing_fast``
puts a queued change (or revert) in the fast lane; ``revert_request`` queues the revert of
a landed change, and ``revert_cancel`` takes a queued revert back.
"""

import re
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import TypeVar

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from landing import flaky, pause
from landing.locks import lander_lock
from landing.models import FlakyTest, Lander, LanderState
from landing.settling import settle_dead_batches
from projects.errors import Conflict
from projects.fsm import fire
from projects.models import Event, Project
from projects.queue import enqueue_on_commit
from projects.roles import Role
from projects.services import require_role
from tasks.landing import (
    LAND_JOB,
    REASON_MAX,
    attempt_fast_lane,
    attempt_revert_cancel,
    attempt_revert_queue,
    task_dequeue,
)
from tasks.models import Task

T = TypeVar("T")


def landing_dequeue(*, task: Task, actor, to: str, reason: str) -> Task:
    """Take ``task`` out of the landing queue (``task_dequeue``: who may, the state, then
    the body). A change a batch has taken stays while that batch's lander is alive (409
    ``landing_in_progress``); if its lander is gone, the batch is settled first and the
    dequeue goes on (``_once_the_lander_is_gone``): a task whose change landed meanwhile
    is ``done`` and refused as such."""
    return _once_the_lander_is_gone(
        task, partial(task_dequeue, task=task, actor=actor, to=to, reason=reason)
    )


def _once_the_lander_is_gone(task: Task, act: Callable[..., T]) -> T:
    """``act()``; if it is refused ``landing_in_progress`` (a batch has what it acts on) and
    no lander works the project (its lock is free), the batches a dead lander left are
    settled, as the next lander would (landed if the push reached the target, which only
    git can tell; else abandoned, their changes still queued), and ``act(lander_gone=True)``
    is tried once more, holding the lock. A live lander's batch keeps the refusal."""
    try:
        return act()
    except Conflict as exc:
        if exc.code != "landing_in_progress":
            raise
        refused = exc
    # Holding the lock, no lander works the project: "landing" is what a dead one left.
    with lander_lock(task.project_id) as held:
        if not held:
            raise refused
        try:
            settle_dead_batches(task.project)
        except Exception as exc:  # the repository could not be asked
            raise Conflict(
                f"{task} is in a batch whose lander stopped while pushing, and the "
                f"repository cannot be read to tell whether it landed ({exc}); "
                "try again when it can",
                code="landing_in_progress",
            ) from exc
        return act(lander_gone=True)


def landing_retry(*, project: Project, actor, reason: str = "") -> Lander:
    """A manager wakes the project's lander while it backs off: it forgets what failed (an
    Event, ``retry``, with what it was waiting on) and is sent at once, to verify the queue
    once more. 403 for anyone but a manager; 409 ``not_backing_off`` when it is not."""
    require_role(actor, project.pk, Role.MANAGER)
    reason = (reason or "").strip() or "a manager asked the lander to try again"
    with transaction.atomic():
        lander = (
            Lander.objects.select_for_update(no_key=True, of=("self",))
            .select_related("head__task")
            .filter(project=project)
            .first()
        )
        if lander is None or lander.state != LanderState.BACKING_OFF:
            raise Conflict(
                f"the lander of {project.slug} is not backing off; there is nothing to retry",
                code="not_backing_off",
            )
        fire(
            lander,
            "retry",
            actor=actor,
            reason=reason,
            extra={
                "tip": lander.tip,
                "head": lander.head.task.key if lander.head is not None else None,
                "was": lander.reason[:2000],
                "since": lander.since.isoformat() if lander.since else None,
            },
        )
        enqueue_on_commit(LAND_JOB, project.pk)
    return lander


def landing_pause(*, project: Project, actor, reason: str, until: datetime | None = None) -> Lander:
    """A manager pauses the project's landing, with a reason and, if given, when it ends by
    itself: approvals keep queueing; the lander starts no batch until a resume (a batch
    already pushing finishes). An Event, ``pause``. 403 for anyone but a manager, 400 without
    a reason, 409 ``until_passed`` for an end that has passed and ``already_paused``."""
    require_role(actor, project.pk, Role.MANAGER)
    reason = (reason or "").strip()
    if not reason:
        raise ValidationError({"reason": ["say why landing pauses: the page shows it"]})
    now = timezone.now()
    if until is not None and until <= now:
        # The request is well formed; the clock says its end has passed (a schema cannot).
        raise Conflict(
            f"the pause would end at {until.isoformat()}, which has passed; give a time "
            "still to come, or none to pause until a resume",
            code="until_passed",
        )
    with transaction.atomic():
        lander, _ = Lander.objects.select_for_update(no_key=True, of=("self",)).get_or_create(
            project=project
        )
        if lander.paused:
            by = lander.paused_by.get_username() if lander.paused_by_id else "someone"
            raise Conflict(
                f"landing in {project.slug} is already paused, by {by} since "
                f"{lander.paused_at.isoformat()}: {lander.pause_reason}",
                code="already_paused",
            )
        lander.paused_at, lander.paused_by, lander.paused_until = now, actor, until
        lander.pause_reason = reason
        lander.save(update_fields=["paused_at", "paused_by", "pause_reason", "paused_until"])
        Event.record(
            lander,
            actor=actor,
            transition="pause",
            from_state=pause.NOT_PAUSED,
            to_state=pause.PAUSED,
            reason=reason,
            extra={"until": until.isoformat() if until else None},
        )
    return lander


def landing_resume(*, project: Project, actor, reason: str = "") -> Lander:
    """A manager lifts the project's pause: the lander is woken once, and lands what queued
    meanwhile. An Event, ``unpause``, naming the pause it ends. 403 for anyone but a
    manager; 409 ``not_paused``."""
    require_role(actor, project.pk, Role.MANAGER)
    reason = (reason or "").strip() or "a manager resumed landing"
    with transaction.atomic():
        lander = (
            Lander.objects.select_for_update(no_key=True, of=("self",))
            .filter(project=project)
            .first()
        )
        if lander is None or not lander.paused:
            raise Conflict(
                f"landing in {project.slug} is not paused; there is nothing to resume",
                code="not_paused",
            )
        pause.lift(lander, actor=actor, reason=reason)
    return lander


TEST_MAX = 500
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def landing_quarantine(
    *, project: Project, actor, test: str, quarantined: bool, reason: str = ""
) -> FlakyTest:
    """A manager quarantines a test of the project (its failures then neither block a landing
    nor blame a change; they are still shown), with a reason, or releases it. An Event,
    ``quarantine`` or ``release``. 403 for anyone but a manager; 400 for a test id that is
    empty, longer than 500 characters or holds a control character, and for a quarantine
    without a reason; 409 ``already_quarantined`` and ``not_quarantined``."""
    require_role(actor, project.pk, Role.MANAGER)
    test = (test or "").strip()
    if not test or len(test) > TEST_MAX or CONTROL.search(test):
        raise ValidationError(
            {"test": [f"a test id as its JUnit names it (1 to {TEST_MAX} characters, one line)"]}
        )
    reason = (reason or "").strip()
    if quarantined and not reason:
        raise ValidationError({"reason": ["say why the test is quarantined: the page shows it"]})
    with transaction.atomic():
        row = (
            FlakyTest.objects.select_for_update(no_key=True, of=("self",))
            .filter(project=project, test=test)
            .first()
        )
        if quarantined and row is not None and row.quarantined:
            raise Conflict(
                f"{test} is already quarantined: {row.reason}", code="already_quarantined"
            )
        if not quarantined and (row is None or not row.quarantined):
            raise Conflict(f"{test} is not quarantined", code="not_quarantined")
        if row is None:
            row = FlakyTest.objects.create(project=project, test=test)
        return flaky.set_quarantine(
            row,
            actor=actor,
            on=quarantined,
            reason=reason or "a manager released it from quarantine",
        )


def landing_fast(*, task: Task, actor, reason: str, alone: bool = False) -> Task:
    """A manager puts ``task``'s queued change at the head of the queue, with a reason kept
    in the trail (an Event, ``fast_lane``): it lands before every change not in the fast
    lane, alone in its batch if ``alone``, and is verified on the target as it is like any
    other (the fast lane changes the order, never the checks). The lander is woken. 403 for
    anyone but a manager, 400 without a reason, 409 ``invalid_state``, ``landing_in_progress``
    and ``already_fast`` (``tasks.landing.attempt_fast_lane``)."""
    require_role(actor, task.project_id, Role.MANAGER)
    reason = (reason or "").strip()
    if not reason:
        raise ValidationError({"reason": ["say why this change goes first: the trail keeps it"]})
    if "\x00" in reason:
        raise ValidationError({"reason": ["text may not contain NUL characters"]})
    with transaction.atomic():
        attempt_fast_lane(task=task, actor=actor, reason=reason, alone=bool(alone))
        enqueue_on_commit(LAND_JOB, task.project_id)
    task.refresh_from_db()
    return task


def revert_request(*, task: Task, actor, reason: str) -> Task:
    """A manager asks the lander to revert ``task``'s landed change, with a reason: the
    revert is queued like a change (in its turn, or the fast lane by ``landing_fast``),
    built with ``git revert`` on the target as it is then, verified there, and pushed; when
    it lands the task reopens with the reason in its next context, and the trail links the
    two commits (``landing.lander.land_revert``). An Event, ``revert_requested``; the lander
    is woken. 403 for anyone but a manager of the task's project; 400 without a reason (or
    one with NUL, or over 10,000 characters); 409 ``not_landed``, ``landing_off`` and
    ``revert_queued`` (``tasks.landing.attempt_revert_queue``). A refusal changes nothing."""
    require_role(actor, task.project_id, Role.MANAGER)
    reason = _revert_reason(
        reason, missing="say why the change is reverted: the next attempt reads it"
    )
    attempt_revert_queue(task=task, actor=actor, reason=reason)
    task.refresh_from_db()
    return task


def revert_cancel(*, task: Task, actor, reason: str) -> Task:
    """A manager takes back a queued revert of ``task``'s landed change, with a reason: it
    leaves the queue before the lander builds it, and the task stays done at its landed
    commit (``tasks.landing.attempt_revert_cancel``). An Event, ``revert_cancelled``. A
    revert a batch has taken stays while that batch's lander is alive; if its lander is
    gone, the batch is settled first (``_once_the_lander_is_gone``): a revert that reached
    the target meanwhile has reopened the task, and the cancel is refused as such. 403 for
    anyone but a manager of the task's project; 400 as ``revert_request``'s reason; 409
    ``no_revert_queued`` and ``landing_in_progress``. A refusal changes nothing."""
    require_role(actor, task.project_id, Role.MANAGER)
    reason = _revert_reason(reason, missing="say why the revert is cancelled: the trail keeps it")
    _once_the_lander_is_gone(
        task, partial(attempt_revert_cancel, task=task, actor=actor, reason=reason)
    )
    task.refresh_from_db()
    return task


def _revert_reason(reason: str, *, missing: str) -> str:
    """A manager's reason to revert, or to cancel a revert, stripped: some text (else 400
    saying ``missing``), no NUL, at most ``REASON_MAX`` characters."""
    reason = (reason or "").strip()
    if not reason:
        raise ValidationError({"reason": [missing]})
    if "\x00" in reason:
        raise ValidationError({"reason": ["text may not contain NUL characters"]})
    if len(reason) > REASON_MAX:
        raise ValidationError({"reason": [f"at most {REASON_MAX} characters"]})
    return reason
