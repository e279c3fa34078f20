"""Every state change of an attempt under its lease, and of its checks.

``task_claim`` starts an attempt under a lease; the holder extends it
(``attempt_heartbeat``), saves where to resume (``attempt_checkpoint_save``), gives the
task back or marks it blocked (``attempt_release``), or submits it for checking
(``attempt_submit``). A lease that runs out ends the attempt (``attempt_expire``,
``leases_expire_overdue``). When every gate run has finished, ``attempt_checks_conclude``
moves the attempt and its task on (``attempt_gates_passed`` or ``attempt_gates_failed``).

Each locks through ``tasks.services.lock_task_and_attempt`` (task first, then attempt)
and fires the transition with ``projects.fsm.fire``, in one transaction.
"""

import contextlib
import logging
from collections.abc import Iterable
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import OuterRef, Subquery
from django.utils import timezone

from decisions.models import SpecVersion, SpecVersionState
from evidence.models import FINISHED_GATE_STATES
from evidence.services import gate_runs_create
from projects import metrics
from projects.errors import Conflict, PermissionDenied
from projects.fsm import check, fire
from projects.models import Event, Project
from projects.paths import paths_may_overlap
from projects.policy import declaring
from projects.queue import enqueue_on_commit
from projects.roles import Role
from projects.selectors import project_ids_for
from projects.services import check_storable
from tasks import claim_sql, selectors
from tasks.comments import comments_resolve_changed
from tasks.landing import attempt_requeue, clean_rebase_of
from tasks.models import Attempt, AttemptState, Task, TaskState
from tasks.services import lock_task_and_attempt

log = logging.getLogger(__name__)

CONCLUDE_JOB = "tasks.jobs.attempt_conclude_job"


# --- Claiming and leases ------------------------------------------------------------------


def lease_duration(lease_seconds) -> timedelta:
    """The lease asked for, within the configured bounds (400 outside them)."""
    if lease_seconds is None:
        lease_seconds = settings.FACTORY_LEASE_SECONDS_DEFAULT
    low, high = settings.FACTORY_LEASE_SECONDS_MIN, settings.FACTORY_LEASE_SECONDS_MAX
    if (
        isinstance(lease_seconds, bool)
        or not isinstance(lease_seconds, int)
        or not (low <= lease_seconds <= high)
    ):
        raise ValidationError(
            {"lease_seconds": f"must be a whole number of seconds from {low} to {high}"}
        )
    return timedelta(seconds=lease_seconds)


def _expire(task: Task, attempt: Attempt) -> None:
    fire(attempt, "expire", actor=None, reason="lease expired without a heartbeat")
    fire(task, "expire", actor=None, reason=f"the lease of {attempt} expired")


@metrics.claims_counted
def task_claim(
    *, agent, project: Project | None = None, labels: Iterable[str] = (), lease_seconds=None
) -> Attempt | None:
    """Give ``agent`` the best claimable task under a new lease, or None when there is none.

    Two agents never get the same task: the candidate row is taken with
    ``SELECT … FOR UPDATE SKIP LOCKED`` (PostgreSQL; SQLite serialises writers), and
    the transition's own ``WHERE state = …`` refuses a stale write. Leases that ran
    out in the agent's projects are expired first, so expiry works without a worker.
    On PostgreSQL the claim is one statement (``tasks.claim_sql``) that writes the
    same rows and events as the ORM path below, which runs when a lease must be
    expired first, on SQLite, and in projects that avoid overlap: there the best task
    whose ``allowed_paths`` overlap no work in progress (``Project.avoids_overlap``) is
    preferred, and the attempt's ``skipped_for_overlap`` names the better-placed tasks
    passed over (when none is apart, the best is claimed as usual).
    """
    lease = lease_duration(lease_seconds)
    project_ids = project_ids_for(agent, Role.AGENT)
    if project is not None:
        if project.pk not in project_ids:
            raise PermissionDenied(f"you are not an agent in project {project.slug}")
        project_ids = [project.pk]
    if not project_ids:
        raise PermissionDenied("you are not an agent in any project")
    now = timezone.now()
    apart = _avoiding_overlap(project_ids)
    if connection.vendor == "postgresql" and not apart:
        claimed = claim_sql.claim(
            agent=agent, project_ids=project_ids, labels=list(labels), lease=lease, now=now
        )
        if claimed is None:
            return None
        if claimed is not claim_sql.OVERDUE:
            claimed.skipped_for_overlap = []
            return claimed
    for attempt_id in selectors.overdue_attempt_ids(project_ids=project_ids, now=now):
        _expire_quietly(attempt_id)
    with transaction.atomic():
        candidates = selectors.claimable_tasks(project_ids=project_ids, labels=labels)
        skipped, task = [], None
        if apart:
            skipped, preferred = _apart_from_work_in_progress(candidates, apart)
            task = _lock_first(candidates.filter(pk__in=preferred)) if preferred else None
        if task is None:
            skipped, task = [], _lock_first(candidates)
        if task is None:
            return None
        # The candidate query proved the dependencies done; done is final, so the
        # transition's condition need not ask the database again.
        task.dependencies_checked = True
        attempt = Attempt.objects.create(
            task=task,
            number=task.attempt_count + 1,
            agent=agent,
            spec_version_id=task.current_spec_version_id,
            lease_expires_at=now + lease,
            heartbeat_at=now,
        )
        Event.record(
            attempt,
            actor=agent,
            transition="start",
            from_state="",
            to_state=attempt.state,
            extra={"lease_expires_at": attempt.lease_expires_at.isoformat()},
        )
        skipped = skipped[: skipped.index(task.key)] if task.key in skipped else skipped
        extra = {"attempt": attempt.number, **({"skipped_for_overlap": skipped} if skipped else {})}
        fire(task, "claim", actor=agent, attempt=attempt, extra=extra)
    # The claim's answer says which better-placed tasks it passed over, and why.
    attempt.skipped_for_overlap = skipped
    return attempt


# How many of the best claimable tasks a claim that avoids overlap looks through.
OVERLAP_LOOKAHEAD = 50
WORK_IN_PROGRESS = [TaskState.CLAIMED, TaskState.CHECKING, TaskState.IN_REVIEW, TaskState.APPROVED]


def _avoiding_overlap(project_ids) -> set[int]:
    """The projects, of ``project_ids``, whose claims prefer tasks apart from work in progress."""
    projects = Project.objects.filter(pk__in=project_ids).only("landing", "claim_avoid_overlap")
    return {project.pk for project in projects if project.avoids_overlap}


def _apart_from_work_in_progress(candidates, projects: set[int]) -> tuple[list[str], list[int]]:
    """Of the best claimable tasks, the keys of those whose ``allowed_paths`` may overlap a
    task in progress, in review or queued to land in the same project (in claim order),
    and the ids of those that overlap none: fewer conflicts when the work lands."""
    busy: dict[int, list[list[str]]] = {}
    for project_id, paths in Task.objects.filter(
        project_id__in=projects, state__in=WORK_IN_PROGRESS
    ).values_list("project_id", "allowed_paths"):
        busy.setdefault(project_id, []).append(paths)
    skipped, apart = [], []
    for pk, key, project_id, paths in candidates.values_list(
        "pk", "key", "project_id", "allowed_paths"
    )[:OVERLAP_LOOKAHEAD]:
        if project_id in projects and any(
            paths_may_overlap(paths, other) for other in busy.get(project_id, ())
        ):
            skipped.append(key)
        else:
            apart.append(pk)
    return skipped, apart


def _lock_first(candidates) -> Task | None:
    return (
        candidates.select_for_update(no_key=True, skip_locked=True, of=("self",))
        .select_related("project", "spec")
        .annotate(current_spec_version_id=_current_version_id())
        .first()
    )


def _current_version_id():
    return Subquery(
        SpecVersion.objects.filter(
            spec_id=OuterRef("spec_id"), state=SpecVersionState.ACCEPTED
        ).values("pk")[:1]
    )


def _expire_quietly(attempt_id: int) -> None:
    with contextlib.suppress(Conflict):  # a heartbeat, or another claimer, got there first
        attempt_expire(attempt=Attempt(pk=attempt_id))


def attempt_heartbeat(*, attempt: Attempt, actor, lease_seconds=None) -> Attempt:
    """Extend a live lease by ``lease_seconds`` from now."""
    lease = lease_duration(lease_seconds)
    with transaction.atomic():
        attempt = attempt.fence(actor)
        now = timezone.now()
        attempt.heartbeat_at = now
        attempt.lease_expires_at = now + lease
        attempt.save(update_fields=["heartbeat_at", "lease_expires_at"])
    return attempt


def attempt_checkpoint_save(*, attempt: Attempt, actor, data, revision: int) -> Attempt:
    """Save the agent's resume point if ``revision`` is the one it last saw (0 for none).

    A stale revision is refused with 409 ``checkpoint_conflict`` and the current revision,
    so two writers never silently overwrite each other.
    """
    if isinstance(revision, bool) or not isinstance(revision, int) or revision < 0:
        raise ValidationError({"revision": "must be the revision you last saw, 0 for none"})
    check_storable(data, "data")
    with transaction.atomic():
        attempt = attempt.fence(actor)
        if revision != attempt.checkpoint_revision:
            raise Conflict(
                f"the checkpoint of {attempt} is at revision {attempt.checkpoint_revision},"
                f" not {revision}; fetch it and retry",
                code="checkpoint_conflict",
                extra={"revision": attempt.checkpoint_revision},
            )
        attempt.checkpoint = data
        attempt.checkpoint_revision += 1
        attempt.checkpoint_at = timezone.now()
        attempt.save(update_fields=["checkpoint", "checkpoint_revision", "checkpoint_at"])
    return attempt


def _refuse_lost_lease(attempt: Attempt) -> None:
    if attempt.state == AttemptState.ABANDONED:
        raise Conflict(
            f"the lease on attempt {attempt} ran out and it was abandoned; claim the task again",
            code="lease_lost",
        )


def attempt_release(*, attempt: Attempt, actor, reason: str = "", blocked: bool = False) -> Attempt:
    """Give the task back (→ ready), or mark it blocked (→ blocked, a reason required)."""
    reason = (reason or "").strip()
    with transaction.atomic():
        task, attempt = lock_task_and_attempt(attempt.pk)
        _refuse_lost_lease(attempt)
        name = "block" if blocked else "release"
        check(attempt, name, actor=actor)
        if blocked and not reason:
            raise ValidationError({"reason": "say what blocks the task, so a manager can clear it"})
        fire(attempt, name, actor=actor, reason=reason, end_reason=reason or "released")
        fire(task, name, actor=actor, reason=reason)
    return attempt


def attempt_submit(
    *, attempt: Attempt, actor, summary: str, change: dict, idempotency_key: str = ""
) -> Attempt:
    """Submit the attempt for checking: running → checking, one gate run queued per policy gate.

    A retry with the same ``idempotency_key`` returns the attempt as it is and changes
    nothing, so a client that lost the answer may simply send the request again.
    """
    with transaction.atomic():
        task, attempt = lock_task_and_attempt(attempt.pk)
        if (
            idempotency_key
            and attempt.idempotency_key == idempotency_key
            and attempt.agent_id == getattr(actor, "pk", None)
        ):
            if (attempt.summary, attempt.change) != (summary, change):
                raise Conflict(
                    "this Idempotency-Key was used for a different submission of this attempt",
                    code="idempotency_key_reused",
                )
            return attempt
        _refuse_lost_lease(attempt)
        if declaring(task.project.gate_policy, "needs_commit") and not (change or {}).get("commit"):
            # Checked before anything changes: the runner verifies a commit, not a claim.
            raise ValidationError(
                {
                    "change.commit": "this project's runner verifies each submission at its commit: name it"
                }
            )
        fire(
            attempt,
            "submit",
            actor=actor,
            summary=summary,
            change=change,
            idempotency_key=idempotency_key,
        )
        fire(task, "submit", actor=actor)
        comments_resolve_changed(attempt)
        # The runs are written with the submission, so a lost job message is found
        # later by the reconciler; their jobs start once this commits.
        runs = gate_runs_create(attempt=attempt, policy=task.project.gate_policy)
        if not runs:  # no gate to wait for: conclude at once, as the last gate would
            enqueue_on_commit(CONCLUDE_JOB, attempt.pk)
    gates = [run.gate for run in runs]
    log.info(
        "attempt %s of %s submitted; gates: %s",
        attempt.pk,
        task.key,
        ", ".join(gates) or "none",
        extra={"task": task.key, "attempt": attempt.pk, "gates": gates},
    )
    return attempt


def attempt_expire(*, attempt: Attempt) -> Attempt:
    """The system ends an attempt whose lease ran out: running → abandoned, task → ready."""
    with transaction.atomic():
        task, attempt = lock_task_and_attempt(attempt.pk)
        _expire(task, attempt)
        metrics.lease_expired(project=task.project.slug)
    return attempt


def leases_expire_overdue() -> int:
    """Expire every running attempt whose lease has run out; return how many were expired."""
    expired = 0
    for attempt_id in selectors.overdue_attempt_ids(now=timezone.now()):
        try:
            attempt_expire(attempt=Attempt(pk=attempt_id))
        except Conflict:
            continue  # a heartbeat or another reconciler got there first
        expired += 1
    return expired


# --- Checks -------------------------------------------------------------------------------


def attempt_gates_passed(*, attempt: Attempt, reason: str = "") -> Attempt:
    """Every gate passed: attempt → passed, task → in review. Fired by the system only."""
    with transaction.atomic():
        task, attempt = lock_task_and_attempt(attempt.pk)
        fire(attempt, "gates_passed", actor=None, reason=reason)
        fire(task, "gates_passed", actor=None, reason=reason)
    return attempt


def attempt_gates_failed(*, attempt: Attempt, reason: str) -> Attempt:
    """A gate failed: attempt → failed; task → ready, or failed when its attempts are used up."""
    with transaction.atomic():
        task, attempt = lock_task_and_attempt(attempt.pk)
        fire(attempt, "gates_failed", actor=None, reason=reason, end_reason=reason)
        fire(task, "gates_failed", actor=None, reason=reason)
    return attempt


def attempt_checks_conclude(*, attempt: Attempt) -> Attempt:
    """When every gate run of a checking attempt has finished, move the task on exactly once.

    All passed → in review (or, with landing on, straight back to the landing queue when
    it is a clean rebase of a change that came back: ``tasks.landing.attempt_requeue``);
    any failed or errored → ready (or failed when attempts are
    used up), with the failing gates and their summaries as the reason. Called when a
    gate run finishes (``evidence.signals.gate_run_finished``) and by the reconciler;
    with the attempt row locked, two gates finishing at once still move the task on once.
    """
    with transaction.atomic():
        _, attempt = lock_task_and_attempt(attempt.pk)
        if attempt.state != AttemptState.CHECKING:
            return attempt
        runs = list(attempt.gate_runs.order_by("gate"))
        if any(run.state not in FINISHED_GATE_STATES for run in runs):
            return attempt
        failures = [run for run in runs if run.counts_as_failure]
        if failures:
            reason = "; ".join(f"{run.gate}: {run.summary}" for run in failures)
            return attempt_gates_failed(attempt=attempt, reason=f"gates failed — {reason}")
        if attempt.task.project.lands:
            earlier = clean_rebase_of(attempt)
            if earlier is not None:
                return attempt_requeue(attempt=attempt, earlier=earlier)
        passed = ", ".join(run.gate for run in runs) or "no gates configured"
        return attempt_gates_passed(attempt=attempt, reason=f"gates passed: {passed}")
