"""The landing queue's state changes on tasks and attempts (the merge queue, docs/landing.md).

With landing on, an approval queues the task (``approved``); the lander (``landing/``)
takes the queue in approval order and reports back through these services: a change on
the target is ``task_land`` (→ done, ``landed_commit``), one that cannot land is
``task_landing_return`` (→ ready, the reason on the attempt for the next context). A
manager takes a task out with ``task_dequeue``. Each is one transaction with the task and
attempt rows locked, and each is safe to call twice: a task no longer queued with that
attempt is left as it is, so a lander delivered twice moves nothing twice.
"""

from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from evidence.selectors import measured_run
from projects import metrics
from projects.errors import Conflict
from projects.fsm import check, fire
from projects.models import Event
from projects.queue import enqueue_on_commit
from runner.mirror import FULL_ID
from tasks.models import Attempt, AttemptState, Task, TaskState
from tasks.services import lock_landing_mode, lock_task_and_attempt

LANDING_STATES = ("queued", "landing", "landed", "conflict", "failed", "error", "dequeued")
# The lander's job, by name (``projects.queue``): it lives in the landing app, above tasks.
LAND_JOB = "landing.jobs.land_job"
# The longest reason a dequeue takes, as every reason of the API and pages.
REASON_MAX = 10_000


def queued_landing(attempt: Attempt) -> dict:
    """The ``landing`` block an approval queues: the commit the runner verified, else the
    one submitted if it is a full object id, and what the change is byte for byte
    (``change_id``). Never a branch or a short id: a name resolved later can lead
    somewhere else (409 ``no_commit`` when the attempt names no such commit)."""
    _, runner = measured_run(attempt)
    commit = (runner or {}).get("commit") or (attempt.change or {}).get("commit") or ""
    if not FULL_ID.fullmatch(commit):
        said = f"names {commit!r}, not a full commit id" if commit else "names no commit"
        raise Conflict(
            f"{attempt} {said}, and the runner verified none; with landing on, the queue "
            "lands only a commit the runner verified or a full object id (40 hex digits): "
            "ask for a new attempt that names its commit in full",
            code="no_commit",
        )
    return {"state": "queued", "commit": commit.lower(), "change_id": change_id_of(attempt)}


def pull_noted(landing: dict | None) -> dict:
    """What a change's landing says of its pull request (``landing.pull``: ``number``,
    ``branch``, the ``heads`` the lander put there), landing through a host; empty when
    none. An older record kept only the number there."""
    pull = (landing or {}).get("pull")
    if isinstance(pull, int) and not isinstance(pull, bool):
        return {"number": pull}
    return pull if isinstance(pull, dict) else {}


def heads_noted(landing: dict | None) -> list[str]:
    """The heads the site knows on a change's pull request branch: the approved commit, and
    every commit the lander itself put there (newest last)."""
    return [(landing or {}).get("commit", ""), *pull_noted(landing).get("heads", [])]


def change_id_of(attempt: Attempt) -> str:
    """What the attempt's change is byte for byte, up to line offsets, as the runner
    measured it (``runner.mirror.change_id``); empty when it measured nothing."""
    run, _ = measured_run(attempt)
    return ((run.verdict or {}).get("change_id") or "") if run is not None else ""


@dataclass(frozen=True)
class Carry:
    """What an earlier approval of the task means for an attempt that passed its gates:
    ``earlier`` is the latest approved attempt before it (None when there is none),
    ``carries`` whether its approval goes over to this one, and ``why`` says why or why not,
    for the trail and the reviewer."""

    earlier: Attempt | None = None
    carries: bool = False
    why: str = ""


def approval_to_carry(attempt: Attempt) -> Carry:
    """Whether ``attempt`` takes over an earlier approval of its task without a review.

    Only when all hold: the earlier approved change came back from landing (a conflict,
    or tests failing once merged; not taken out by a manager); this change is byte for
    byte that one up to line offsets (``change_id``: whitespace, line endings and bytes
    that are not UTF-8 all count); it is held to the same spec version, so the same
    criteria; it was submitted by someone other than the reviewer whose verdict would be
    carried; and that approval was given by a reviewer, not itself carried, and never
    carried before. Anything else goes to review, where the reviewer sees what differs
    (``tasks.interdiff``). ``git patch-id`` was the rule once, and it ignores whitespace,
    which is meaning in Python, YAML and Makefiles (docs/landing.md).
    """
    if attempt.number == 1:
        return Carry()  # nothing came before it
    earlier = (
        Attempt.objects.filter(
            task_id=attempt.task_id, state=AttemptState.APPROVED, number__lt=attempt.number
        )
        .select_related("reviewed_by", "spec_version__spec")
        .order_by("-number")
        .first()
    )
    if earlier is None:
        return Carry()
    reviewer = earlier.reviewed_by.get_username() if earlier.reviewed_by_id else "a reviewer"
    approved = f"attempt #{earlier.number}, which {reviewer} approved"
    landing = earlier.landing or {}
    mine = change_id_of(attempt)
    if landing.get("state") not in ("conflict", "failed"):
        why = f"{approved}, did not come back from landing ({landing.get('state') or 'not queued'})"
    elif not mine:
        why = f"the runner did not measure this change byte for byte, to compare with {approved}"
    elif not landing.get("change_id"):
        why = f"{approved}, was not measured byte for byte (approved before that was recorded)"
    elif landing["change_id"] != mine:
        why = f"the change differs from {approved}"
    elif attempt.spec_version_id != earlier.spec_version_id:
        why = f"it is held to {_version(attempt)}; {approved}, was held to {_version(earlier)}"
    elif attempt.agent_id == earlier.reviewed_by_id:
        why = f"{reviewer} submitted it and approved attempt #{earlier.number}: nobody approves their own work"
    elif "rebase_of" in landing:
        why = f"{approved}, had its approval carried from attempt #{landing['rebase_of']}: an approval is carried once"
    elif Attempt.objects.filter(
        task_id=attempt.task_id, landing__rebase_of=earlier.number
    ).exists():
        why = f"the approval of {approved}, was carried to an attempt before: an approval is carried once"
    else:
        return Carry(
            earlier,
            True,
            f"the same change byte for byte as {approved} (up to line offsets), held to "
            f"{_version(attempt)}: queued to land again without a second review",
        )
    return Carry(earlier, False, f"reviewed again: {why}")


def _version(attempt: Attempt) -> str:
    version = attempt.spec_version
    return f"{version.spec.key} v{version.number}" if version is not None else "no spec"


def attempt_requeue(*, attempt: Attempt, carry: Carry) -> Attempt:
    """checking → approved without a second review: ``attempt`` passed its gates and
    ``approval_to_carry`` found that it carries ``carry.earlier``'s approval. Fired by the
    system only, when the gates conclude; the record says whose approval it is and why."""
    earlier = carry.earlier
    with transaction.atomic():
        task, attempt = lock_task_and_attempt(attempt.pk)
        landing = {**queued_landing(attempt), "rebase_of": earlier.number}
        fire(
            attempt,
            "requeue",
            actor=None,
            reason=carry.why,
            extra={"rebase_of": earlier.number, "change_id": landing["change_id"]},
            earlier=earlier,
            end_reason=carry.why,
            landing=landing,
        )
        fire(task, "requeue", actor=None, reason=carry.why, extra={"attempt": attempt.number})
        enqueue_on_commit(LAND_JOB, task.project_id)
    return attempt


def landing_queue(project_id: int) -> QuerySet[Attempt]:
    """The project's queued changes in the order they land in: the fast lane first, in the
    order managers put them there, then the rest, first approved first. The one place the
    queue's order is written."""
    return (
        Attempt.objects.filter(
            task__project_id=project_id,
            task__state=TaskState.APPROVED,
            task__current_attempt=F("pk"),
            state=AttemptState.APPROVED,
        )
        .select_related("task", "reviewed_by", "spec_version__spec")
        .order_by(F("fast_at").asc(nulls_last=True), "queued_at", "pk")
    )


def queue_position(attempt: Attempt) -> int:
    """Where a queued change stands in its project's landing queue (1: it lands next), in
    ``landing_queue``'s order: the fast lane first, by when managers put changes there,
    then the rest by when they were approved."""
    before = Q(queued_at__lt=attempt.queued_at) | Q(queued_at=attempt.queued_at, pk__lt=attempt.pk)
    if attempt.fast_at is None:
        ahead = Q(fast_at__isnull=False) | Q(fast_at__isnull=True) & before
    else:
        ahead = Q(fast_at__lt=attempt.fast_at) | Q(fast_at=attempt.fast_at) & before
    return landing_queue(attempt.task.project_id).filter(ahead).count() + 1


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
        details = dict(details or {})
        if "pull" in details and not isinstance(details["pull"], dict):
            # The pull request it came back from, beside what the lander noted there.
            details["pull"] = {**pull_noted(attempt.landing), "number": details["pull"]}
        attempt.landing = {**attempt.landing, **details, "state": state, "reason": reason}
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


def task_dequeue(*, task: Task, actor, to: str, reason: str, lander_gone: bool = False) -> Task:
    """A manager takes a queued task out of the landing queue, with a reason: back to
    ``in_review`` (the approval is withdrawn; it is reviewed again) or to ``ready`` (the
    attempt keeps its approval; a new attempt does the work again).

    A change a batch has taken (``landing``) stays while its lander works: 409
    ``landing_in_progress``. ``lander_gone``: the caller holds the project's lander lock
    and has settled what a dead lander left (``landing.services.landing_dequeue``), so a
    change still marked ``landing`` belongs to no live batch and may leave.

    Who may is checked before what was given: the destination and the reason (some
    text, no NUL, at most ``REASON_MAX`` characters) are refused only to a manager."""
    reason = (reason or "").strip()
    errors = {}
    if to not in (TaskState.IN_REVIEW, TaskState.READY):
        errors["to"] = "choose in_review or ready"
    if not reason:
        errors["reason"] = "say why the task leaves the landing queue"
    elif "\x00" in reason:
        errors["reason"] = "text may not contain NUL characters"
    elif len(reason) > REASON_MAX:
        errors["reason"] = f"at most {REASON_MAX} characters"
    with transaction.atomic():
        task, attempt = lock_task_and_attempt(task_id=task.pk)
        check(task, "dequeue", actor=actor)
        if errors:
            raise ValidationError(errors)
        if attempt is None or attempt.state != AttemptState.APPROVED:
            raise Conflict(f"{task} has no approved attempt in the queue", code="invalid_state")
        if attempt.landing.get("state") == "landing" and not lander_gone:
            raise Conflict(
                f"{task} is in a batch being landed now; try again when the batch ends",
                code="landing_in_progress",
            )
        fire(task, "dequeue", actor=actor, reason=reason, extra={"to": to}, to=to)
        if to == TaskState.IN_REVIEW:
            fire(attempt, "review_again", actor=actor, reason=reason, end_reason=reason)
        else:
            attempt.landing = {**attempt.landing, "state": "dequeued", "reason": reason}
            attempt.queued_at = attempt.fast_at = None
            attempt.save(update_fields=["landing", "queued_at", "fast_at"])
        metrics.landing_left(project=task.project.slug, outcome="dequeued")
    return task


def attempt_fast_lane(*, task: Task, actor, reason: str, alone: bool) -> Attempt:
    """Put ``task``'s queued change in the fast lane: it lands before every change not in
    it (alone in its batch if ``alone``), verified on the target like any other; or its
    queued revert (``attempt_revert_queue``), which always lands alone. An Event on the
    task, ``fast_lane``. The caller checked the role. 409 ``invalid_state`` when
    the task has no queued change, ``landing_in_progress`` when a batch has it now, and
    ``already_fast`` when it is in the fast lane already."""
    with transaction.atomic():
        task, attempt = lock_task_and_attempt(task_id=task.pk)
        # A queued revert takes the fast lane as a change does (it always lands alone).
        reverting = task.state == TaskState.DONE and attempt is not None and attempt.revert_at
        if not reverting and (
            task.state != TaskState.APPROVED
            or attempt is None
            or attempt.state != AttemptState.APPROVED
            or attempt.queued_at is None
        ):
            raise Conflict(f"{task} has no change queued to land", code="invalid_state")
        state = (attempt.landing.get("revert") or {}) if reverting else attempt.landing
        if state.get("state") == "landing":
            raise Conflict(
                f"{task} is in a batch being landed now: it is as fast as it gets",
                code="landing_in_progress",
            )
        if attempt.fast_at is not None:
            fast = attempt.landing.get("fast") or {}
            raise Conflict(
                f"{task} is in the fast lane already, by {fast.get('by') or 'someone'}: "
                f"{fast.get('reason', '')}",
                code="already_fast",
            )
        attempt.fast_at = timezone.now()
        attempt.landing = {
            **attempt.landing,
            "fast": {"by": actor.get_username(), "reason": reason, "alone": alone},
        }
        attempt.save(update_fields=["fast_at", "landing"])
        Event.record(
            task,
            actor=actor,
            transition="fast_lane",
            from_state=task.state,
            to_state=task.state,
            reason=reason,
            extra={"attempt": attempt.number, "alone": alone, "revert": bool(reverting)},
        )
    return attempt


# --- Undo: a manager's revert of a landed change (docs/landing.md, "Undo") ------------------


def revert_queue(project_id: int) -> QuerySet[Attempt]:
    """The project's queued reverts in the order they land in: the fast lane first, in the
    order managers put them there, then the rest, first asked first. A revert belongs to the
    approved attempt of a task that is done at its landed commit."""
    return (
        Attempt.objects.filter(
            task__project_id=project_id,
            task__state=TaskState.DONE,
            task__current_attempt=F("pk"),
            revert_at__isnull=False,
        )
        .select_related("task")
        .order_by(F("fast_at").asc(nulls_last=True), "revert_at", "pk")
    )


def revert_goes_first(revert: Attempt, change: Attempt | None) -> bool:
    """Whether the queued ``revert`` lands before the queued ``change``: in the fast lane
    before anything not in it, else in the order each joined (the revert's turn)."""
    if change is None:
        return True
    if (revert.fast_at is None) != (change.fast_at is None):
        return revert.fast_at is not None
    if revert.fast_at is not None:
        return revert.fast_at <= change.fast_at
    return change.queued_at is None or revert.revert_at <= change.queued_at


def attempt_revert_queue(*, task: Task, actor, reason: str) -> Attempt:
    """Queue the revert of ``task``'s landed change, with the manager's reason: the lander
    lands it like any change. An Event on the task, ``revert_requested``, naming the landed
    commit. The caller checked the role and the reason. 409 ``not_landed`` when the task's
    change is not on the target (not done, or done without landing), ``landing_off`` when the
    project's lander does not land its changes, ``revert_queued`` when a revert is queued."""
    with transaction.atomic():
        task, attempt = lock_task_and_attempt(task_id=task.pk)
        landing = (attempt.landing or {}) if attempt is not None else {}
        if (
            task.state != TaskState.DONE
            or not task.landed_commit
            or landing.get("state") != "landed"
        ):
            raise Conflict(
                f"{task} has no landed change to revert (it is {task.state})", code="not_landed"
            )
        project = lock_landing_mode(task)
        if not project.lands:
            raise Conflict(
                f"{task.project.slug} does not land reverts through its lander now; revert "
                f"{task.landed_commit[:12]} on the repository itself",
                code="landing_off",
            )
        if attempt.revert_at is not None:
            revert = landing.get("revert") or {}
            raise Conflict(
                f"a revert of {task} is queued already, asked by {revert.get('by') or 'someone'} "
                f"at {attempt.revert_at.isoformat()}: {revert.get('reason', '')}",
                code="revert_queued",
            )
        now = timezone.now()
        attempt.revert_at, attempt.fast_at = now, None
        attempt.landing = {
            **landing,
            "revert": {
                "state": "queued",
                "by": actor.get_username(),
                "reason": reason,
                "at": now.isoformat(),
                "reverts": task.landed_commit,
            },
        }
        attempt.save(update_fields=["revert_at", "fast_at", "landing"])
        _revert_event(task, attempt, "revert_requested", actor=actor, reason=reason)
        enqueue_on_commit(LAND_JOB, task.project_id)
    return attempt


def attempt_revert_cancel(*, task: Task, actor, reason: str, lander_gone: bool = False) -> Attempt:
    """A manager takes back a queued revert, with a reason: it leaves the queue, the lander
    never builds it, and the task stays done at its landed commit. The attempt's
    ``landing.revert`` keeps what was asked and says who cancelled it and why (``state:
    cancelled``, ``cancelled: {by, reason, at}``); an Event on the task,
    ``revert_cancelled``. The caller checked the role and the reason.

    409 ``no_revert_queued`` when no revert of the task is queued (saying what the task is),
    ``landing_in_progress`` when a batch has taken the revert while its lander works.
    ``lander_gone``: the caller holds the project's lander lock and settled what a dead
    lander left (``landing.services.revert_cancel``), so a revert still marked ``landing``
    belongs to no live batch and may be cancelled."""
    with transaction.atomic():
        task, attempt = lock_task_and_attempt(task_id=task.pk)
        if task.state != TaskState.DONE or attempt is None or attempt.revert_at is None:
            raise Conflict(_no_revert_queued(task, attempt), code="no_revert_queued")
        revert = attempt.landing.get("revert") or {}
        if revert.get("state") == "landing" and not lander_gone:
            raise Conflict(
                f"the revert of {task} is in batch {revert.get('batch')} being landed now; "
                "try again when the batch ends",
                code="landing_in_progress",
            )
        now = timezone.now()
        attempt.revert_at = attempt.fast_at = None
        attempt.landing = {
            **attempt.landing,
            "revert": {
                **revert,
                "state": "cancelled",
                "cancelled": {"by": actor.get_username(), "reason": reason, "at": now.isoformat()},
            },
        }
        attempt.save(update_fields=["landing", "revert_at", "fast_at"])
        _revert_event(task, attempt, "revert_cancelled", actor=actor, reason=reason)
    return attempt


def _no_revert_queued(task: Task, attempt: Attempt | None) -> str:
    """Why there is no revert of ``task`` to cancel: what the task is, and how its last
    revert ended, if it had one."""
    if task.state == TaskState.DONE and task.landed_commit:
        now = f"it is done, landed at {task.landed_commit[:12]}"
    else:
        now = f"it is {task.state}"
    last = ((attempt.landing or {}).get("revert") or {}) if attempt is not None else {}
    if last.get("state"):
        now += f"; its last revert was {last['state']}"
    return f"no revert of {task} is queued to cancel: {now}"


def _revert_event(task: Task, attempt: Attempt, transition: str, *, actor, reason: str) -> None:
    """The Event of a revert asked, cancelled or sent back: on the task, which stays in its state,
    naming the attempt and the landed commit the revert takes out."""
    Event.record(
        task,
        actor=actor,
        transition=transition,
        from_state=task.state,
        to_state=task.state,
        reason=reason,
        extra={"attempt": attempt.number, "reverts": task.landed_commit},
    )


def _revert_queued(attempt_id: int) -> tuple[Task, Attempt] | None:
    """The task and attempt, locked, if the attempt's revert is still queued."""
    task, attempt = lock_task_and_attempt(attempt_id)
    if (
        task.state != TaskState.DONE
        or task.current_attempt_id != attempt.pk
        or attempt.revert_at is None
    ):
        return None
    return task, attempt


def attempt_revert_note(*, attempt: Attempt, **fields) -> bool:
    """Record where a queued revert is (``state: landing``, its batch) without moving it;
    False, changing nothing, when it is no longer queued."""
    with transaction.atomic():
        found = _revert_queued(attempt.pk)
        if found is None:
            return False
        _, attempt = found
        revert = {**attempt.landing.get("revert", {}), **fields}
        attempt.landing = {**attempt.landing, "revert": revert}
        attempt.save(update_fields=["landing"])
    return True


def task_revert_land(*, attempt: Attempt, commit: str, batch: int | None) -> bool:
    """The revert of the attempt's landed change is on the target at ``commit``: task →
    ready, the change's landing record ``reverted`` with the manager's reason, which the
    next context carries. The Event (``revert``) names both commits, and the landing record
    the revert's commit: the trail links them both ways. Fired by the lander only; False,
    changing nothing, if it already happened."""
    with transaction.atomic():
        found = _revert_queued(attempt.pk)
        if found is None:
            return False
        task, attempt = found
        revert = attempt.landing.get("revert", {})
        landed = task.landed_commit
        attempt.landing = {
            **attempt.landing,
            "state": "reverted",
            "reason": f"reverted by {revert.get('by') or 'a manager'}: {revert.get('reason', '')}",
            "revert": {**revert, "state": "landed", "commit": commit, "batch": batch},
        }
        attempt.revert_at = attempt.fast_at = None
        attempt.save(update_fields=["landing", "revert_at", "fast_at"])
        fire(
            task,
            "revert",
            actor=None,
            reason=f"{landed[:12]} reverted at {commit[:12]}: {revert.get('reason', '')}"[:2000],
            extra={
                "attempt": attempt.number,
                "reverts": landed,
                "commit": commit,
                "batch": batch,
                "by": revert.get("by"),
            },
        )
    return True


def attempt_revert_return(*, attempt: Attempt, reason: str, details: dict | None = None) -> bool:
    """The revert cannot land (it does not apply on the target as it is, or its tests fail
    there): it leaves the queue with the reason, and the task stays done. An Event on the
    task, ``revert_returned``. False, changing nothing, if the revert is no longer queued."""
    with transaction.atomic():
        found = _revert_queued(attempt.pk)
        if found is None:
            return False
        task, attempt = found
        revert = attempt.landing.get("revert", {})
        attempt.landing = {
            **attempt.landing,
            "revert": {**revert, **(details or {}), "state": "returned", "why": reason},
        }
        attempt.revert_at = attempt.fast_at = None
        attempt.save(update_fields=["landing", "revert_at", "fast_at"])
        _revert_event(task, attempt, "revert_returned", actor=None, reason=reason[:2000])
    return True
