"""Every write to a task itself: create, publish, unblock, reopen, cancel, edit, and the
context bundle's fetch; and ``lock_task_and_attempt``, the one way to lock a task with its
attempt.

The state changes of an attempt live beside it: claiming, leases, checkpoints, release,
submission and the gates' outcome in ``tasks.attempts``, the reviewer's verdict in
``tasks.review``, comments on diff lines in ``tasks.comments``, the reconciler in
``tasks.reconciler``.

One service per state change. Each opens ``transaction.atomic()``, locks the rows
it changes (task before attempt, always, so two services never deadlock; and with
``FOR NO KEY UPDATE``, which does not block the foreign-key checks of rows that
merely refer to them, such as events and evidence), fires
the transition through ``projects.fsm.fire`` — which checks state, permission and
conditions and writes the ``Event`` — and queues side effects with
``enqueue_on_commit``. The REST API, the review UI, the admin and the Celery
jobs all call these; none of them repeats a check.
"""

from collections.abc import Iterable

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from projects.errors import Conflict, PermissionDenied
from projects.fsm import fire
from projects.models import Event, Project
from projects.numbers import clean_budget
from projects.paths import clean_allowed_paths
from projects.roles import Role, has_role
from projects.services import require_role
from tasks import context
from tasks.models import Attempt, AttemptState, Label, Task, TaskState

# --- Tasks ----------------------------------------------------------------------------------

# What Task.budget_usd holds: 10 digits, 2 of them cents.
TASK_BUDGET_DIGITS = 8


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
    budget_usd=None,
    origin: str = "",
) -> Task:
    """Create a draft task with the next key of the project (a manager's action).

    ``budget_usd`` is what one attempt at it may cost (null: no limit); an attempt whose
    self-reported cost reaches it is ended (``tasks.attempts.attempt_heartbeat``).
    ``origin`` names where the task came from outside (``github:owner/name#12``), unique
    in the project: a second task of the same origin is refused by the database.
    """
    require_role(actor, project.pk, Role.MANAGER)
    budget_usd = clean_budget(budget_usd, "budget_usd", digits=TASK_BUDGET_DIGITS)
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
        budget_usd=budget_usd,
        created_by=actor,
        number=0,
        key="-",
        origin=origin,
    )
    task.full_clean(exclude=["number", "key", "state"], validate_unique=False)
    with transaction.atomic():
        task.number, task.key = Task.next_key_in(project)
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


def lock_task(task_id: int) -> Task:
    """Lock a task (with its project loaded, not locked) before its attempt is fenced."""
    return _lock_task(task_id)


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


def lock_landing_mode(task: Task) -> Project:
    """Lock the task's project row (last, after the task and attempt: ADR 0002) and give the
    task the project as it is now, so a change that lands or not by ``landing.mode`` is
    decided by the mode in force when it commits: a manager's mode change (which locks the
    row too, and refuses while changes are queued) waits for it, or it for the change."""
    task.project = Project.objects.select_for_update(no_key=True, of=("self",)).get(
        pk=task.project_id
    )
    return task.project


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
    "budget_usd",
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
    depends_on (tasks), allowed_paths, max_attempts and budget_usd (null: no limit).
    """
    unknown = set(changes) - EDITABLE_FIELDS
    if unknown:
        raise ValidationError({name: "this field cannot be changed" for name in sorted(unknown)})
    if "budget_usd" in changes:
        changes["budget_usd"] = clean_budget(
            changes["budget_usd"], "budget_usd", digits=TASK_BUDGET_DIGITS
        )
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
