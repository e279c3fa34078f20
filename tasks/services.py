"""Every write to projects, tasks and attempts.

One service per state change. Each opens ``transaction.atomic()``, locks the rows
it changes (task before attempt, always, so two services never deadlock; and with
``FOR NO KEY UPDATE``, which does not block the foreign-key checks of rows that
merely refer to them, such as events and evidence), fires
the transition through ``projects.fsm.fire`` — which checks state, permission and
conditions and writes the ``Event`` — and queues side effects with
``transaction.on_commit``. The REST API, the review UI, the admin and the Celery
jobs all call these; none of them repeats a check.
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
from evidence.models import FINISHED_GATE_STATES, GateRunState
from evidence.selectors import criteria_status
from evidence.services import gate_runs_create, gate_runs_reconcile
from evidence.viewers import diff_lines
from projects.errors import Conflict, PermissionDenied
from projects.fsm import check, fire
from projects.kinds import Kind
from projects.models import Event, Project
from projects.paths import clean_allowed_paths
from projects.policy import declaring
from projects.queue import enqueue_on_commit
from projects.roles import REVIEWER_NOT_HOLDER, Role, has_role
from projects.selectors import project_ids_for
from projects.services import check_storable, require_role
from projects.tokens import tokens_delete_expired
from runner.mirror import sweep
from tasks import claim_sql, context, review, selectors
from tasks.models import Attempt, AttemptState, Label, LineComment, Task, TaskState

logger = logging.getLogger(__name__)

CONCLUDE_JOB = "tasks.jobs.attempt_conclude_job"


# --- Tasks ----------------------------------------------------------------------------------


def clean_task_links(
    *, project: Project, spec=None, depends_on: Iterable[Task] = (), allowed_paths=(), task=None
) -> list[str]:
    """Check what a task refers to: a spec and dependencies of its own project, no
    dependency cycle, and a path boundary of relative globs. Returns the cleaned paths."""
    if spec is not None and spec.project_id != project.pk:
        raise ValidationError({"spec": f"{spec} belongs to another project"})
    depends_on = list(depends_on)
    foreign = [t.key for t in depends_on if t.project_id != project.pk]
    if foreign:
        raise ValidationError({"depends_on": f"{', '.join(foreign)} belong to another project"})
    if (
        task is not None
        and task.pk
        and (any(t.pk == task.pk for t in depends_on) or _depends_transitively(depends_on, task.pk))
    ):
        raise ValidationError({"depends_on": "that would make the task depend on itself"})
    return clean_allowed_paths(allowed_paths)


def _labels_for(project: Project, names: Iterable[str]) -> list[Label]:
    labels = []
    for name in sorted({n.strip().lower() for n in names if n and n.strip()}):
        try:
            Label(project=project, name=name).full_clean(exclude=["project"], validate_unique=False)
        except ValidationError as exc:
            raise ValidationError({"labels": f"{name!r}: {'; '.join(exc.messages)}"}) from None
        labels.append(Label.objects.get_or_create(project=project, name=name)[0])
    return labels


def task_create(
    *,
    project: Project,
    actor,
    title: str,
    description: str = "",
    spec=None,
    priority: int = 0,
    labels: Iterable[str] = (),
    depends_on: Iterable[Task] = (),
    allowed_paths: Iterable[str] = (),
    max_attempts: int | None = None,
) -> Task:
    """Create a draft task with the next key of the project (a manager's action)."""
    require_role(actor, project.pk, Role.MANAGER)
    depends_on = list(depends_on)
    allowed_paths = clean_task_links(
        project=project, spec=spec, depends_on=depends_on, allowed_paths=allowed_paths
    )
    task = Task(
        project=project,
        title=title,
        description=description,
        spec=spec,
        priority=priority,
        allowed_paths=allowed_paths,
        max_attempts=max_attempts or project.max_attempts,
        created_by=actor,
        number=0,
        key="-",
    )
    task.full_clean(exclude=["number", "key", "state"], validate_unique=False)
    with transaction.atomic():
        task.number, task.key = project.next_key("task")
        task.save()
        task.labels.set(_labels_for(project, labels))
        task.depends_on.set(depends_on)
        Event.record(task, actor=actor, transition="create", from_state="", to_state=task.state)
    return task


def _lock_task(task_id: int) -> Task:
    # of=("self",): lock the task row only, not the joined project or attempt rows.
    return (
        Task.objects.select_for_update(no_key=True, of=("self",))
        .select_related("project", "current_attempt")
        .get(pk=task_id)
    )


def _lock_attempt(attempt_id: int) -> Attempt:
    return (
        Attempt.objects.select_for_update(no_key=True, of=("self",))
        .select_related("task")
        .get(pk=attempt_id)
    )


def lock_task_and_attempt(
    attempt_id: int | None = None, *, task_id: int | None = None
) -> tuple[Task, Attempt | None]:
    """Lock an attempt and its task, task first (the one lock order, so no deadlocks).

    Given ``task_id`` instead: the task and the attempt it holds once locked (None if none).
    """
    if task_id is None:
        task_id = Attempt.objects.values_list("task_id", flat=True).get(pk=attempt_id)
    task = _lock_task(task_id)
    attempt_id = task.current_attempt_id if attempt_id is None else attempt_id
    if attempt_id is None:
        return task, None
    attempt = _lock_attempt(attempt_id)
    attempt.task = task
    if task.current_attempt_id == attempt.pk:
        task.current_attempt = attempt
    return task, attempt


def _task_transition(task: Task, name: str, *, actor, reason: str = "") -> Task:
    with transaction.atomic():
        task = _lock_task(task.pk)
        fire(task, name, actor=actor, reason=reason)
    return task


def task_publish(*, task: Task, actor, reason: str = "") -> Task:
    """draft → ready: the task becomes claimable (once its dependencies are done). Managers."""
    return _task_transition(task, "publish", actor=actor, reason=reason)


def task_unblock(*, task: Task, actor, reason: str = "") -> Task:
    """blocked → ready, once a manager has removed what blocked it."""
    return _task_transition(task, "unblock", actor=actor, reason=reason)


def task_reopen(*, task: Task, actor, reason: str = "") -> Task:
    """failed → ready with a fresh attempt budget. Managers."""
    return _task_transition(task, "reopen", actor=actor, reason=reason)


def task_cancel(*, task: Task, actor, reason: str = "") -> Task:
    """draft | ready | blocked | failed → cancelled. Managers."""
    return _task_transition(task, "cancel", actor=actor, reason=reason)


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
    expired first and on SQLite.
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
    if connection.vendor == "postgresql":
        claimed = claim_sql.claim(
            agent=agent, project_ids=project_ids, labels=list(labels), lease=lease, now=now
        )
        if claimed is None:
            return None
        if claimed is not claim_sql.OVERDUE:
            return claimed
    for attempt_id in selectors.overdue_attempt_ids(project_ids=project_ids, now=now):
        _expire_quietly(attempt_id)
    with transaction.atomic():
        candidates = selectors.claimable_tasks(project_ids=project_ids, labels=labels)
        task = (
            candidates.select_for_update(no_key=True, skip_locked=True, of=("self",))
            .select_related("project", "spec")
            .annotate(current_spec_version_id=_current_version_id())
            .first()
        )
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
        fire(task, "claim", actor=agent, attempt=attempt, extra={"attempt": attempt.number})
    return attempt


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
    return attempt


def attempt_expire(*, attempt: Attempt) -> Attempt:
    """The system ends an attempt whose lease ran out: running → abandoned, task → ready."""
    with transaction.atomic():
        task, attempt = lock_task_and_attempt(attempt.pk)
        _expire(task, attempt)
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


# --- Gates and review --------------------------------------------------------------------


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

    All passed → in review; any failed or errored → ready (or failed when attempts are
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
        passed = ", ".join(run.gate for run in runs) or "no gates configured"
        return attempt_gates_passed(attempt=attempt, reason=f"gates passed: {passed}")


def reconcile() -> dict:
    """Bring every unfinished piece of work forward from what the database says.

    Expires overdue leases; re-queues gate runs whose worker died and re-dispatches
    queued runs whose job never started (``evidence.services.gate_runs_reconcile``);
    concludes checking attempts whose gates have all finished; deletes expired API
    tokens; removes runner workspaces older than a runner may run (left by a runner
    killed mid-run, on this machine). Safe to run at any time and from several places
    at once.
    """
    counts = {"leases_expired": leases_expire_overdue(), **gate_runs_reconcile()}
    counts["workspaces_swept"] = sweep(
        older_than=settings.FACTORY_RUNNER_TIME_LIMIT + settings.FACTORY_GATE_GRACE_SECONDS
    )
    checking = Attempt.objects.filter(state=AttemptState.CHECKING).exclude(
        gate_runs__state__in=[GateRunState.QUEUED, GateRunState.RUNNING]
    )
    counts["attempts_concluded"] = 0
    for attempt in checking:
        if attempt_checks_conclude(attempt=attempt).state != AttemptState.CHECKING:
            counts["attempts_concluded"] += 1
    counts["tokens_deleted"] = tokens_delete_expired()
    return counts


def task_review(
    *,
    task: Task,
    actor,
    verdict: str,
    reason: str = "",
    criteria: Iterable[dict] = (),
    comments: Iterable[dict] = (),
) -> Task:
    """The reviewer's verdict on a task in review, and on its attempt.

    ``approve``: in review → done, when every criterion of the pinned version is met or
    not applicable and each ``review`` criterion is marked (``criteria``: ``[{key,
    verdict: met|not_met|na, note}]``; ``tasks.review.judge``). ``reject``: in review →
    ready (or failed when its attempts are used up), with a reason or a criterion marked
    not met, which the next attempt can act on. Only a reviewer of the project who did
    not submit the attempt (403 ``own_work``); each state machine's transition checks it,
    once. The attempt keeps each criterion's verdict and what was in force when it was
    judged (``tasks.review.in_force``), whatever changes after. ``comments``
    (``comment_add``'s fields) are written with the verdict, or nothing is.
    """
    if verdict not in ("approve", "reject"):
        raise ValidationError({"verdict": "choose approve or reject"})
    name, reason = verdict, (reason or "").strip()
    with transaction.atomic():
        task, attempt = lock_task_and_attempt(task_id=task.pk)
        number = attempt.number if attempt else None
        # Refuses the wrong state or the wrong reviewer before anything else is looked at.
        check(task, name, actor=actor)
        # Raised in the transaction: a refused verdict keeps nothing.
        record = review.judge(name, criteria, criteria_status(attempt))
        if name == "reject" and not reason:
            reason = review.unmet_text(record)
        if name == "reject" and not reason:
            raise ValidationError(
                {
                    "reason": "a rejection needs a reason, or a criterion marked not met,"
                    " that the next attempt can act on"
                }
            )
        fire(task, name, actor=actor, reason=reason, extra={"attempt": number})
        for index, comment in enumerate(comments):
            try:
                comment_add(attempt=attempt, actor=actor, **comment)
            except ValidationError as exc:  # named by its place in the list
                raise ValidationError(
                    {f"comments[{index}].{k}": v for k, v in exc.message_dict.items()}
                ) from exc
        applied = review.in_force(task, attempt)
        fire(
            attempt,
            name,
            actor=actor,
            reason=reason,
            extra={"applied": review.applied_text(applied), "criteria": _marked(record)},
            reviewer=actor,
            end_reason=reason,
            applied=applied,
            criteria_verdicts=record,
        )
    return task


def _marked(record: list[dict]) -> dict:
    """The reviewer's own marks, for the verdict's Event: ``{"AC-3": "not_met"}``."""
    return {r["key"]: r["verdict"] for r in record if r["by"] == "reviewer"}


def task_approve(*, task: Task, actor, reason: str = "", criteria: Iterable[dict] = ()) -> Task:
    """in review → done (``task_review`` with ``approve``)."""
    return task_review(task=task, actor=actor, verdict="approve", reason=reason, criteria=criteria)


def task_reject(*, task: Task, actor, reason: str, comments: Iterable[dict] = ()) -> Task:
    """in review → ready or failed, with the reason (``task_review`` with ``reject``)."""
    return task_review(task=task, actor=actor, verdict="reject", reason=reason, comments=comments)


# --- Editing and reading with a record ---------------------------------------------------

EDITABLE_STATES = (TaskState.DRAFT, TaskState.READY, TaskState.BLOCKED)
EDITABLE_FIELDS = {
    "title",
    "description",
    "priority",
    "spec",
    "labels",
    "depends_on",
    "allowed_paths",
    "max_attempts",
}


def _depends_transitively(start: Iterable[Task], target_id: int) -> bool:
    seen, frontier = set(), {t.pk for t in start}
    while frontier:
        if target_id in frontier:
            return True
        seen |= frontier
        frontier = (
            set(
                Task.depends_on.through.objects.filter(from_task_id__in=frontier).values_list(
                    "to_task_id", flat=True
                )
            )
            - seen
        )
    return False


def task_update(*, task: Task, actor, **changes) -> Task:
    """Edit a draft, ready or blocked task (managers); the edit is recorded as an Event.

    ``changes`` may hold title, description, priority, spec, labels (names),
    depends_on (tasks), allowed_paths and max_attempts.
    """
    unknown = set(changes) - EDITABLE_FIELDS
    if unknown:
        raise ValidationError({name: "this field cannot be changed" for name in sorted(unknown)})
    with transaction.atomic():
        task = _lock_task(task.pk)
        require_role(actor, task.project_id, Role.MANAGER)
        if task.state not in EDITABLE_STATES:
            raise Conflict(
                f"{task} is {task.state}; only draft, ready or blocked tasks are edited",
                code="invalid_state",
            )
        depends_on = changes.pop("depends_on", None)
        labels = changes.pop("labels", None)
        paths = clean_task_links(
            project=task.project,
            spec=changes.get("spec"),
            depends_on=depends_on or (),
            allowed_paths=changes.get("allowed_paths", ()),
            task=task,
        )
        if "allowed_paths" in changes:
            changes["allowed_paths"] = paths
        # Only what really changes is written and recorded.
        changes = {name: value for name, value in changes.items() if getattr(task, name) != value}
        for name, value in changes.items():
            setattr(task, name, value)
        task.full_clean(exclude=["number", "key", "state", "project"], validate_unique=False)
        task.save(update_fields=[*changes, "updated_at"])
        edited = list(changes)
        if depends_on is not None and set(depends_on) != set(task.depends_on.all()):
            task.depends_on.set(depends_on)
            edited.append("depends_on")
        if labels is not None:
            new_labels = _labels_for(task.project, labels)
            if set(new_labels) != set(task.labels.all()):
                task.labels.set(new_labels)
                edited.append("labels")
        edited.sort()
        Event.record(
            task,
            actor=actor,
            transition="edit",
            from_state=task.state,
            to_state=task.state,
            extra={"fields": edited},
        )
    return task


def task_context(
    *, task: Task, actor, max_chars: int | None = None, markdown: bool = False
) -> dict:
    """The context bundle for ``task`` (see ``tasks.context``); with ``markdown``, measured
    and trimmed for its Markdown brief (``tasks.brief``).

    The agent holding the task's running attempt gets it under its live lease, and the
    fetch is recorded on the attempt (hash, manifest, time); reviewers and managers of
    the project may read it without recording. Anyone else is refused.
    """
    if max_chars is not None and (
        isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1
    ):
        raise ValidationError({"max_chars": "must be a positive whole number of characters"})
    current = task.current_attempt
    holding = (
        current is not None
        and current.state == AttemptState.RUNNING
        and current.agent_id == actor.pk
    )
    if not holding and not has_role(actor, task.project_id, Role.REVIEWER, Role.MANAGER):
        raise PermissionDenied(
            "the context is for the agent holding the task, and for its project's reviewers and managers",
            code="not_lease_holder",
        )
    bundle = context.build(
        task, current=current if holding else None, max_chars=max_chars, markdown=markdown
    )
    if holding:
        with transaction.atomic():
            attempt = current.fence(actor)  # 409 lease_lost: nothing is handed out
            attempt.context_sha256 = bundle["bundle_sha256"]
            attempt.context_manifest = bundle["manifest"]
            attempt.context_fetched_at = timezone.now()
            attempt.save(update_fields=["context_sha256", "context_manifest", "context_fetched_at"])
    return bundle


# --- Line comments ---------------------------------------------------------------------------


def _lines_of(attempt: Attempt) -> dict:
    diff = selectors.commented_diff(attempt.evidence.filter(kind=Kind.DIFF).order_by("id"))
    if diff is None:
        return {}
    try:
        return diff_lines(diff)
    except ValidationError:
        return {}


def comment_add(
    *, attempt: Attempt, actor, path: str, line: int, end_line=None, side="new", body: str
) -> LineComment:
    """A reviewer's comment on lines of the attempt's diff, while it waits for review.

    Refused: anyone but a reviewer of the project who did not submit it (403
    ``own_work``), an attempt not in review (409 ``invalid_state``: nothing after the
    verdict), a file the diff does not change or lines it does not show (400 naming
    ``path`` or ``line``), an empty or longer than ``FACTORY_COMMENT_MAX_CHARS`` body.
    """
    body = (body or "").strip()
    end_line = line if end_line is None else end_line
    errors = {}
    if side not in ("new", "old"):
        errors["side"] = "new (the changed file's lines) or old (the original's)"
    if not body:
        errors["body"] = "say what is wrong"
    elif len(body) > settings.FACTORY_COMMENT_MAX_CHARS:
        errors["body"] = f"at most {settings.FACTORY_COMMENT_MAX_CHARS} characters"
    if not isinstance(line, int) or line < 1 or not isinstance(end_line, int) or end_line < line:
        errors["line"] = "a line from 1, and an end_line not before it"
    if errors:
        raise ValidationError(errors)
    check_storable(body, "body")
    with transaction.atomic():
        _, attempt = lock_task_and_attempt(attempt.pk)
        # Who may comment is who may judge the attempt: the rule of its review transitions.
        if refused := REVIEWER_NOT_HOLDER.refusal(attempt, actor):
            code, reason = refused
            raise PermissionDenied(reason, code=code)
        if attempt.state != AttemptState.PASSED:
            raise Conflict(
                f"{attempt} is {attempt.state}: comments are written while it waits for review",
                code="invalid_state",
                extra={"state": attempt.state},
            )
        files = _lines_of(attempt)
        if not files:
            raise ValidationError({"path": f"{attempt} has no diff to comment on"})
        if path not in files:
            raise ValidationError({"path": f"{attempt}'s diff does not change {path[:200]}"})
        lines = files[path]
        shown, changed = (lines.new, lines.added) if side == "new" else (lines.old, lines.removed)
        missing = [n for n in range(line, end_line + 1) if n not in shown]
        if missing:
            raise ValidationError(
                {"line": f"the diff does not show line {missing[0]} of {path} ({side} side)"}
            )
        quote = [[n, shown[n], n in changed] for n in range(line, end_line + 1)]
        comment = LineComment.objects.create(
            attempt=attempt,
            author=actor,
            path=path,
            side=side,
            line=line,
            end_line=end_line,
            body=body,
            quote=quote,
        )
        Event.record(comment, actor=actor, transition="comment", from_state="", to_state="open")
    return comment


def comment_resolve(*, comment: LineComment, actor) -> LineComment:
    """Mark a comment resolved by hand: reviewers of the project, once, and never an agent
    of an attempt of the task (403 ``own_work``): the work's author does not close its
    own review."""
    require_role(actor, comment.attempt.task.project_id, Role.REVIEWER)
    if Attempt.objects.filter(task_id=comment.attempt.task_id, agent=actor).exists():
        raise PermissionDenied(
            "you worked on this task; another reviewer must resolve its comments",
            code="own_work",
        )
    with transaction.atomic():
        comment = LineComment.objects.select_for_update().get(pk=comment.pk)
        if comment.resolved_at is not None:
            raise Conflict(f"{comment} is already resolved", code="invalid_state")
        comment.resolved_at = timezone.now()
        comment.resolved_reason = f"resolved by {actor.get_username()}"
        comment.save(update_fields=["resolved_at", "resolved_reason"])
        Event.record(
            comment, actor=actor, transition="resolve", from_state="open", to_state="resolved"
        )
    return comment


def _lines_changed(comment: LineComment, files: dict) -> bool:
    """Whether ``files`` (a later attempt's diff) shows the commented lines otherwise than
    the commented attempt's did. Both diffs start from the task's base: a line neither of
    them changes is the base's in both; a line one of them changed must read the same in
    the other, or it was changed."""
    lines = files.get(comment.path)
    for number, text, was_changed in comment.quote:
        if comment.side == "old":
            if (lines is not None and number in lines.removed) != was_changed:
                return True
            continue
        shown = lines is not None and number in lines.new
        now = (lines.new[number], number in lines.added) if shown else (None, False)
        if (was_changed or now[1]) and now != (text, was_changed):
            return True
    return False


def comments_resolve_changed(attempt: Attempt) -> int:
    """In the submit's transaction: resolve the open comments on earlier attempts of the
    task whose lines this attempt's diff changes (``_lines_changed``); a comment it does
    not reach is resolved by hand."""
    open_comments = list(
        LineComment.objects.filter(
            attempt__task_id=attempt.task_id, attempt__number__lt=attempt.number, resolved_at=None
        )
    )
    if not open_comments:
        return 0
    files = _lines_of(attempt)
    now, resolved = timezone.now(), 0
    for comment in open_comments:
        if not _lines_changed(comment, files):
            continue
        comment.resolved_at, comment.resolved_by = now, attempt
        comment.resolved_reason = f"{attempt} changed these lines"
        comment.save(update_fields=["resolved_at", "resolved_by", "resolved_reason"])
        Event.record(
            comment,
            actor=None,
            transition="resolve",
            from_state="open",
            to_state="resolved",
            reason=comment.resolved_reason,
        )
        resolved += 1
    return resolved
