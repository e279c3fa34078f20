"""The landing queue's state changes on tasks and attempts (the merge queue, docs/landing.md).

With landing on, an approval queues the task (``approved``); the lander (``landing/``)
takes the queue in approval order and reports back through these services: a change on
the target is ``task_land`` (→ done, ``landed_commit``), one that cannot land is
``task_landing_return`` (→ ready, the reason on the attempt for the next context). A
manager takes a task out with ``task_dequeue``. Each is one transaction with the task and
attempt rows locked, and each is safe to call twice: a task no longer queued with that
attempt is left as it is, so a lander delivered twice moves nothing twice.
"""

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from evidence.selectors import measured_run
from projects import metrics
from projects.errors import Conflict
from projects.fsm import check, fire
from projects.queue import enqueue_on_commit
from tasks.models import Attempt, AttemptState, Task, TaskState
from tasks.services import lock_task_and_attempt

LANDING_STATES = ("queued", "landing", "landed", "conflict", "failed", "error", "dequeued")
# The lander's job, by name (``projects.queue``): it lives in the landing app, above tasks.
LAND_JOB = "landing.jobs.land_job"


def queued_landing(attempt: Attempt) -> dict:
    """The ``landing`` block an approval queues: the commit the runner verified (else the
    one submitted) and its patch id. Never a branch: a branch moved after approval must
    not land (409 ``no_commit`` when the attempt names no commit at all)."""
    _, runner = measured_run(attempt)
    commit = (runner or {}).get("commit") or (attempt.change or {}).get("commit")
    if not commit:
        raise Conflict(
            f"{attempt} names no commit, and landing is on: the queue lands a commit, "
            "never a branch",
            code="no_commit",
        )
    return {"state": "queued", "commit": commit, "patch_id": _patch_id(attempt)}


def _patch_id(attempt: Attempt) -> str:
    run, _ = measured_run(attempt)
    return ((run.verdict or {}).get("patch_id") or "") if run is not None else ""


def clean_rebase_of(attempt: Attempt) -> Attempt | None:
    """The earlier attempt of the same task whose approved change came back from landing
    with the same patch id as ``attempt``'s: a clean rebase of it, or None."""
    patch = _patch_id(attempt)
    if not patch:
        return None
    earlier = (
        Attempt.objects.filter(
            task_id=attempt.task_id,
            state=AttemptState.APPROVED,
            number__lt=attempt.number,
            landing__state__in=["conflict", "failed"],
        )
        .select_related("reviewed_by")
        .order_by("-number")
        .first()
    )
    if earlier is None or earlier.landing.get("patch_id") != patch:
        return None
    return earlier


def attempt_requeue(*, attempt: Attempt, earlier: Attempt) -> Attempt:
    """checking → approved without a second review: ``attempt`` passed its gates and is a
    clean rebase of ``earlier``, whose approval it carries (Gerrit's trivial-rebase rule).
    Fired by the system only, when the gates conclude; the record says so."""
    reviewer = earlier.reviewed_by.get_username() if earlier.reviewed_by_id else "a reviewer"
    reason = (
        f"a clean rebase of attempt #{earlier.number} (the same patch id), which {reviewer} "
        "approved: queued to land again without a second review"
    )
    with transaction.atomic():
        task, attempt = lock_task_and_attempt(attempt.pk)
        landing = {**queued_landing(attempt), "rebase_of": earlier.number}
        fire(
            attempt,
            "requeue",
            actor=None,
            reason=reason,
            extra={"rebase_of": earlier.number},
            earlier=earlier,
            end_reason=reason,
            landing=landing,
        )
        fire(task, "requeue", actor=None, reason=reason, extra={"attempt": attempt.number})
        enqueue_on_commit(LAND_JOB, task.project_id)
    return attempt


def landing_queue(project_id: int) -> QuerySet[Attempt]:
    """The project's queued changes, first approved first: the order they land in."""
    return (
        Attempt.objects.filter(
            task__project_id=project_id,
            task__state=TaskState.APPROVED,
            task__current_attempt=F("pk"),
            state=AttemptState.APPROVED,
        )
        .select_related("task", "reviewed_by", "spec_version__spec")
        .order_by("queued_at", "pk")
    )


def _queued(attempt_id: int) -> tuple[Task, Attempt] | None:
    """The task and attempt, locked, if the attempt is still its task's queued change."""
    task, attempt = lock_task_and_attempt(attempt_id)
    if task.state != TaskState.APPROVED or task.current_attempt_id != attempt.pk:
        return None
    return task, attempt


def attempt_landing_note(*, attempt: Attempt, **fields) -> bool:
    """Record where a queued change is (``state: landing``, its batch, an ``error``) without
    moving it; False, changing nothing, when it is no longer queued."""
    with transaction.atomic():
        found = _queued(attempt.pk)
        if found is None:
            return False
        _, attempt = found
        attempt.landing = {**attempt.landing, **fields}
        attempt.save(update_fields=["landing"])
    return True


def task_land(*, attempt: Attempt, commit: str, batch: int | None, seconds: float) -> bool:
    """The attempt's approved change is on the target at ``commit``: task → done.

    Fired by the lander only (the system), after the push, or by the lander that finds a
    dead lander's push on the target. False, changing nothing, if it already happened.
    """
    with transaction.atomic():
        found = _queued(attempt.pk)
        if found is None:
            return False
        task, attempt = found
        attempt.landing = {
            **attempt.landing,
            "state": "landed",
            "landed": commit,
            "batch": batch,
            "seconds": round(seconds, 3),
            "reason": "",
        }
        attempt.save(update_fields=["landing"])
        fire(
            task,
            "land",
            actor=None,
            reason=f"landed at {commit[:12]}",
            extra={"attempt": attempt.number, "commit": commit, "batch": batch},
            commit=commit,
        )
        waited = (timezone.now() - attempt.queued_at).total_seconds() if attempt.queued_at else None
        metrics.landing_left(project=task.project.slug, outcome="landed", waited=waited)
    return True


def task_landing_return(
    *, attempt: Attempt, state: str, reason: str, details: dict | None = None
) -> bool:
    """The approved change cannot land (``state``: ``conflict`` or ``failed``): task → ready.

    The attempt keeps its approval and records why (``landing.reason`` and the details:
    conflicting paths and hunks, or failing tests), which the next context carries. Not a
    failed attempt: the budget is not spent. False, changing nothing, if no longer queued.
    """
    if state not in ("conflict", "failed"):
        raise ValueError(f"a change comes back from landing as conflict or failed, not {state}")
    with transaction.atomic():
        found = _queued(attempt.pk)
        if found is None:
            return False
        task, attempt = found
        # The attempt's record first: the event's webhook payload reads it.
        attempt.landing = {**attempt.landing, **(details or {}), "state": state, "reason": reason}
        attempt.save(update_fields=["landing"])
        fire(
            task,
            "landing_returned",
            actor=None,
            reason=reason[:2000],
            extra={"attempt": attempt.number, "landing": state},
        )
        metrics.landing_left(project=task.project.slug, outcome=state)
    return True


def task_dequeue(*, task: Task, actor, to: str, reason: str) -> Task:
    """A manager takes a queued task out of the landing queue, with a reason: back to
    ``in_review`` (the approval is withdrawn; it is reviewed again) or to ``ready`` (the
    attempt keeps its approval; a new attempt does the work again)."""
    reason = (reason or "").strip()
    errors = {}
    if to not in (TaskState.IN_REVIEW, TaskState.READY):
        errors["to"] = "choose in_review or ready"
    if not reason:
        errors["reason"] = "say why the task leaves the landing queue"
    with transaction.atomic():
        task, attempt = lock_task_and_attempt(task_id=task.pk)
        check(task, "dequeue", actor=actor)
        if errors:
            raise ValidationError(errors)
        if attempt is None or attempt.state != AttemptState.APPROVED:
            raise Conflict(f"{task} has no approved attempt in the queue", code="invalid_state")
        if attempt.landing.get("state") == "landing":
            raise Conflict(
                f"{task} is in a batch being landed now; try again when the batch ends",
                code="landing_in_progress",
            )
        fire(task, "dequeue", actor=actor, reason=reason, extra={"to": to}, to=to)
        if to == TaskState.IN_REVIEW:
            fire(attempt, "review_again", actor=actor, reason=reason, end_reason=reason)
        else:
            attempt.landing = {**attempt.landing, "state": "dequeued", "reason": reason}
            attempt.queued_at = None
            attempt.save(update_fields=["landing", "queued_at"])
        metrics.landing_left(project=task.project.slug, outcome="dequeued")
    return task
