"""Every state change of an attempt under its lease, and of its checks.

``task_claim`` starts an attempt under a lease; the holder extends it
(``attempt_heartbeat``), saves where to resume (``attempt_checkpoint_save``), gives the
task back or marks it blocked (``attempt_release``), or submits it for checking
(``attempt_submit``). A lease that runs out ends the attempt (``attempt_expire``,
``leases_expire_overdue``). When every gate run has finished, ``attempt_checks_conclude``
moves the attempt and its task on (``attempt_gates_passed`` or ``attempt_gates_failed``).
A manager voids the usage an attempt reported (``attempt_usage_void``).

Each locks through ``tasks.services.lock_task_and_attempt`` (task first, then attempt)
and fires the transition with ``projects.fsm.fire``, in one transaction.
"""

import contextlib
import logging
from collections.abc import Iterable
from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.contrib.contenttypes.models import ContentType
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
from projects.numbers import usd_text
from projects.paths import paths_may_overlap
from projects.policy import declaring
from projects.queue import enqueue_on_commit
from projects.roles import Role
from projects.selectors import project_ids_for
from projects.services import check_storable
from tasks import brief, claim_sql, selectors
from tasks.comments import comments_resolve_changed
from tasks.landing import approval_to_carry, attempt_requeue
from tasks.models import Attempt, AttemptState, Task, TaskState
from tasks.services import lock_landing_mode, lock_task, lock_task_and_attempt
from tasks.usage import add_usage, clean_usage, cost_of, month_name, month_start

log = logging.getLogger(__name__)

CONCLUDE_JOB = "tasks.jobs.attempt_conclude_job"
# Withdrawals of a task that do not spend an attempt (ADR 0039). The site cannot yet tell
# who a host login is, so an agent with write access could close its own pull request
# before each rejection and never spend one; past these, a close counts as a failure.
WITHDRAWALS_FREE = 2


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
    A project whose spend this month has reached its ``budget_usd`` is left out; when
    every project asked for is, the claim is refused with 409 ``budget_exhausted`` and
    nothing changes (``_within_budget``).
    On PostgreSQL the claim is one statement (``tasks.claim_sql``) that writes the
    same rows and events as the ORM path below. It steps aside when a project asked for
    has a budget (it runs again once the budget is checked) or avoids overlap, and when a
    lease must be expired first; then the ORM path runs, as it always does on SQLite. In
    projects that avoid overlap the best task whose ``allowed_paths`` overlap no work in
    progress (``Project.avoids_overlap``) is preferred, and the attempt's
    ``skipped_for_overlap`` names the better-placed tasks passed over (when none is
    apart, the best is claimed as usual).
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
    labels = list(labels)
    aside = None
    if connection.vendor == "postgresql":
        aside = _claim_in_one_statement(agent, project_ids, labels, lease, now)
        if not isinstance(aside, claim_sql.Aside):
            return _claimed(aside)
    apart, budgets = _claim_settings(project_ids, aside.projects if aside else None)
    if budgets:
        project_ids = _within_budget(project_ids, budgets, now)
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


def _claim_in_one_statement(agent, project_ids, labels, lease, now):
    """The claim statement (``tasks.claim_sql``): the attempt, None, or ``Aside`` when the
    ORM path must claim. In projects with no budget and no overlap to avoid it claims at
    once; where a budget is all it must check, the statement brings the settings, the
    month's spend is read and the statement runs again, in the one transaction: no more
    round trips than reading the settings before the statement would take."""
    with transaction.atomic():
        aside = claim_sql.claim(
            agent=agent, project_ids=project_ids, labels=labels, lease=lease, now=now
        )
        if not isinstance(aside, claim_sql.Aside) or aside.overdue or aside.projects is None:
            return aside
        apart, budgets = _claim_settings(project_ids, aside.projects)
        if apart or not budgets:
            return aside
        return claim_sql.claim(
            agent=agent,
            project_ids=_within_budget(project_ids, budgets, now),
            labels=labels,
            lease=lease,
            now=now,
            settings_read=True,
        )


def _claimed(attempt: Attempt | None) -> Attempt | None:
    """The statement's claim, which never passes a task over for overlap."""
    if attempt is not None:
        attempt.skipped_for_overlap = []
    return attempt


def _claim_settings(project_ids, projects=None) -> tuple[set[int], dict[int, Project]]:
    """Of ``project_ids``, the projects whose claims prefer tasks apart from work in
    progress, and those with a monthly budget: from ``projects`` (as the claim statement
    brought them), else one query, budget or not."""
    if projects is None:
        projects = Project.objects.filter(pk__in=project_ids).only(
            "slug", "landing", "claim_avoid_overlap", "budget_usd"
        )
    apart, budgets = set(), {}
    for project in projects:
        if project.avoids_overlap:
            apart.add(project.pk)
        if project.budget_usd is not None:
            budgets[project.pk] = project
    return apart, budgets


def _within_budget(project_ids: list[int], budgets: dict[int, Project], now) -> list[int]:
    """``project_ids`` without the projects whose spend this month (UTC) has reached their
    budget; 409 ``budget_exhausted`` naming the spend and the budget when none is left.

    One query, only when a project has a budget. A budget is checked when work starts:
    attempts already running finish (their task's own budget stops them).
    """
    spent = selectors.month_spend(project_ids=list(budgets), now=now)
    exhausted = [
        pk for pk, project in budgets.items() if spent.get(pk, Decimal(0)) >= project.budget_usd
    ]
    left = [pk for pk in project_ids if pk not in exhausted]
    if not left:
        project = budgets[next(pk for pk in project_ids if pk in exhausted)]
        spent_usd = usd_text(spent.get(project.pk, Decimal(0)))
        budget_usd = usd_text(project.budget_usd)
        raise Conflict(
            f"project {project.slug} has spent {spent_usd} USD of its {budget_usd} USD budget"
            f" for {month_name(now)} (self-reported by its agents); no new work starts until"
            " next month, or until a manager raises the budget",
            code="budget_exhausted",
            extra={"spent_usd": spent_usd, "budget_usd": budget_usd, "project": project.slug},
        )
    return left


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


def attempt_heartbeat(*, attempt: Attempt, actor, lease_seconds=None, usage=None) -> Attempt:
    """Extend a live lease by ``lease_seconds`` from now, adding ``usage`` (what the agent
    used since its last report, ``tasks.usage``) to the attempt's totals.

    Malformed usage is refused (400) before anything changes, the lease included. When
    the usage takes the attempt's cost to its task's ``budget_usd``, the attempt ends as
    a lost lease ends it (abandoned; the task ready again, or failed once its attempts
    are used up: it counts as a failed attempt) and, once that is committed, the
    heartbeat is refused with 409 ``budget_exhausted``.
    """
    lease = lease_duration(lease_seconds)
    increment = clean_usage(usage)
    exhausted = None
    with transaction.atomic():
        task = None
        if increment:
            # The usage may end the attempt and move its task: task first, as always.
            task = lock_task(attempt.task_id)
        attempt = attempt.fence(actor)
        now = timezone.now()
        attempt.heartbeat_at = now
        attempt.lease_expires_at = now + lease
        fields = ["heartbeat_at", "lease_expires_at"]
        grown = Decimal(0)
        if increment:
            attempt.task = task
            before = cost_of(attempt.usage)
            attempt.usage = add_usage(attempt.usage, increment, task.project.prices)
            grown = cost_of(attempt.usage) - before
            fields.append("usage")
        attempt.save(update_fields=fields)
        if grown > 0:
            _note_project_spend(task, attempt, grown, now)
            exhausted = _end_past_task_budget(task, attempt)
    if exhausted is not None:
        raise exhausted
    return attempt


def _note_project_spend(task: Task, attempt: Attempt, cost: Decimal, now) -> None:
    """Record ``budget.exhausted`` for the project when this report takes its month's
    spend from below its budget to it or past: once per crossing, not on each refusal."""
    if task.project.budget_usd is None or attempt.started_at < month_start(now):
        return
    # The project row, after the attempt's (as evidence quotas take it): of two reports
    # at once, exactly one sees the spend cross the budget.
    budget = (
        Project.objects.select_for_update(no_key=True, of=("self",))
        .values_list("budget_usd", flat=True)
        .get(pk=task.project_id)
    )
    if budget is None:
        return
    spent = selectors.month_spend(project_ids=[task.project_id], now=now).get(
        task.project_id, Decimal(0)
    )
    if not spent - cost < budget <= spent:
        return
    spent_usd, budget_usd = usd_text(spent), usd_text(budget)
    Event.record(
        task.project,
        actor=None,
        transition="exhaust_budget",
        from_state="",
        to_state="",
        reason=f"this month's self-reported spend {spent_usd} USD reached the budget of"
        f" {budget_usd} USD; claims are refused until next month or a higher budget",
        extra={
            "scope": "project",
            "spent_usd": spent_usd,
            "budget_usd": budget_usd,
            "month": month_name(now),
            "task": task.key,
            "attempt": attempt.number,
        },
    )


def _end_past_task_budget(task: Task, attempt: Attempt) -> Conflict | None:
    """End the attempt whose cost reached its task's budget; the refusal to answer with."""
    spent = cost_of(attempt.usage)
    if task.budget_usd is None or spent < task.budget_usd:
        return None
    spent_usd, budget_usd = usd_text(spent), usd_text(task.budget_usd)
    reason = (
        f"budget exhausted: this attempt's self-reported cost {spent_usd} USD reached the"
        f" task's budget of {budget_usd} USD"
    )
    extra = {"scope": "task", "spent_usd": spent_usd, "budget_usd": budget_usd}
    fire(attempt, "exhaust_budget", actor=None, reason=reason, end_reason=reason, extra=extra)
    fire(task, "exhaust_budget", actor=None, reason=reason, extra={"attempt": attempt.number})
    return Conflict(
        f"{reason}; the attempt has ended and the task was given back",
        code="budget_exhausted",
        extra={"spent_usd": spent_usd, "budget_usd": budget_usd},
    )


def attempt_usage_void(*, attempt: Attempt, actor, reason: str) -> Attempt:
    """A manager of the attempt's project voids the usage its agent has reported so far.

    The totals move to ``usage_voided`` (``{by, at, reason, usage}``), kept as the agent
    said them, and the attempt's ``usage`` starts again from nothing: from this commit no
    budget (the project's month, the task's) and no cost view counts them, so a claim
    refused for the month's budget goes ahead at once. What a running attempt reports
    afterwards counts as usual. One ``void_usage`` Event says who, why and what.

    Refused, changing nothing: 403 for anyone but a manager (the transition's
    permission), 409 ``invalid_state`` when already voided, 409 ``nothing_to_void`` when
    nothing was reported, 400 naming ``reason`` without one. An attempt the report ended
    (past its task's budget) stays ended.
    """
    reason = (reason or "").strip()
    with transaction.atomic():
        _, attempt = lock_task_and_attempt(attempt.pk)
        check(attempt, "void_usage", actor=actor)
        if not reason:
            raise ValidationError({"reason": "say why this usage should not count"})
        check_storable(reason, "reason")
        if not attempt.usage:
            raise Conflict(
                f"attempt {attempt} has reported no usage since it started or was last voided",
                code="nothing_to_void",
            )
        voided = attempt.usage
        fire(
            attempt,
            "void_usage",
            actor=actor,
            reason=reason,
            extra={"usage": voided, "month": month_name(attempt.started_at)},
            voided={
                "by": actor.get_username(),
                "at": timezone.now().isoformat().replace("+00:00", "Z"),
                "reason": reason,
            },
        )
    log.info(
        "usage of attempt %s voided: %s USD",
        attempt.pk,
        usd_text(cost_of(voided)),
        extra={"task": attempt.task.key, "attempt": attempt.pk},
    )
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
    *,
    attempt: Attempt,
    actor,
    summary: str,
    change: dict,
    idempotency_key: str = "",
    usage=None,
) -> Attempt:
    """Submit the attempt for checking: running → checking, one gate run queued per policy gate.

    ``usage`` (what the agent used since its last heartbeat) is added to the attempt's
    totals; the submit is not refused for the task's budget (the work is done). A retry
    with the same ``idempotency_key`` returns the attempt as it is and changes nothing,
    its usage not added again, so a client that lost the answer may simply send the
    request again.
    """
    increment = clean_usage(usage)
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
        if increment:
            before = cost_of(attempt.usage)
            attempt.usage = add_usage(attempt.usage, increment, task.project.prices)
            attempt.save(update_fields=["usage"])
            grown = cost_of(attempt.usage) - before
            if grown > 0:
                _note_project_spend(task, attempt, grown, timezone.now())
        runs = _checks_start(task, attempt)
    gates = [run.gate for run in runs]
    log.info(
        "attempt %s of %s submitted; gates: %s",
        attempt.pk,
        task.key,
        ", ".join(gates) or "none",
        extra={"task": task.key, "attempt": attempt.pk, "gates": gates},
    )
    return attempt


def _checks_start(task: Task, attempt: Attempt) -> list:
    """What a submitted attempt starts, in its submission's transaction: line comments on
    lines it changed resolved, and one gate run per gate of the policy. The runs are written
    with the submission, so a lost job message is found later by the reconciler; their jobs
    start once this commits."""
    comments_resolve_changed(attempt)
    runs = gate_runs_create(attempt=attempt, policy=task.project.gate_policy)
    if not runs:  # no gate to wait for: conclude at once, as the last gate would
        enqueue_on_commit(CONCLUDE_JOB, attempt.pk)
    return runs


# A task whose pull request a person's push becomes the attempt of: no agent holds it, and
# it is neither finished nor held by a manager (an approved change only while still queued).
PUSH_TAKES = [TaskState.READY, TaskState.CHECKING, TaskState.IN_REVIEW, TaskState.APPROVED]


def attempt_from_push(
    *, task: Task, person, change: dict, pusher: str, by_the_lander: bool = False
) -> Attempt:
    """A person's push to the task's pull request is a new attempt in their name (issue 33):
    submitted at once with ``change`` (``commit``, the pushed head in full, and ``branch``),
    checked like any submission (the runner verifies it at that commit), then reviewed, the
    reviewer shown the interdiff against what was approved before. ``pusher`` is how the
    host named them (``@login``), for the record.

    The attempt it replaces ends: one still checking or waiting for review is released
    (``supersede``; not a failure of its agent), an approved one still queued to land leaves
    the queue keeping its approval (as a manager's dequeue to ready leaves it). ``person``
    cannot approve this attempt: nobody approves their own work.

    The same push again (any attempt of the task already at that commit) returns that
    attempt and changes nothing. 409 ``agent_holds_it`` while an agent's lease holds the
    task (its own next submission is the attempt), ``landing_in_progress`` while a batch
    lands its approved change (the push is read again once the batch ends) unless the
    lander of that batch asks (``by_the_lander``: it found the head moved and sends the
    change back right after), and ``invalid_state`` for a task finished, blocked or
    failed; each changes nothing.
    """
    commit = change["commit"]
    with transaction.atomic():
        task, current = lock_task_and_attempt(task_id=task.pk)
        again = Attempt.objects.filter(task=task, change__commit=commit).first()
        if again is not None:
            return again
        if task.state == TaskState.CLAIMED:
            raise Conflict(
                f"{current} by {current.agent.get_username()} holds {task} under a lease; its "
                "next submission is the task's attempt",
                code="agent_holds_it",
            )
        if task.state not in PUSH_TAKES:
            raise Conflict(f"{task} is {task.state}", code="invalid_state")
        landing = current.landing.get("state") if current is not None else ""
        if task.state == TaskState.APPROVED and landing == "landing" and not by_the_lander:
            raise Conflict(
                f"{task}'s approved change is being landed now", code="landing_in_progress"
            )
        number = task.attempt_count + 1
        why = f"{pusher} pushed {commit[:12]} to the task's pull request: attempt {number}"
        if current is not None and current.is_live:
            fire(current, "supersede", actor=None, reason=why, end_reason=f"superseded: {why}")
        elif current is not None and current.state == AttemptState.APPROVED:
            current.landing = {**current.landing, "state": "dequeued", "reason": why}
            current.queued_at = current.fast_at = None
            current.save(update_fields=["landing", "queued_at", "fast_at"])
            metrics.landing_left(project=task.project.slug, outcome="dequeued")
        now = timezone.now()
        attempt = Attempt.objects.create(
            task=task,
            number=number,
            agent=person,
            state=AttemptState.CHECKING,
            # The version in force now, as a claim pins it.
            spec_version_id=SpecVersion.objects.filter(
                spec_id=task.spec_id, state=SpecVersionState.ACCEPTED
            )
            .values_list("pk", flat=True)
            .first(),
            summary=f"Pushed to the pull request by {pusher}.",
            change=change,
            submitted_at=now,
            started_at=now,
        )
        Event.record(
            attempt,
            actor=person,
            transition="push",
            from_state="",
            to_state=attempt.state,
            reason=why,
            extra={"commit": commit, "pusher": pusher},
        )
        fire(task, "pushed", actor=None, reason=why, extra={"attempt": number}, attempt=attempt)
        _checks_start(task, attempt)
    return attempt


def attempt_expire(*, attempt: Attempt) -> Attempt:
    """The system ends an attempt whose lease ran out: running → abandoned, task → ready."""
    with transaction.atomic():
        task, attempt = lock_task_and_attempt(attempt.pk)
        _expire(task, attempt)
        metrics.lease_expired(project=task.project.slug)
    return attempt


def attempt_withdraw(*, attempt: Attempt, reason: str, by_its_agent: bool = False) -> bool:
    """The system gives a live attempt's task back (→ ready) because a person withdrew it
    on the code host (closed its pull request): the attempt is released with ``reason``,
    which the next attempt's context carries, and, unlike a failure, it does not count
    against the task's ``max_attempts``.

    Only the task's first ``WITHDRAWALS_FREE`` withdrawals (its ``withdraw`` Events, ever)
    are free: a later one ends the attempt ``failed`` and raises ``failed_attempts`` as a
    failure does (the task fails when they reach ``max_attempts``), the reason saying so.
    None is free when the attempt's own agent closed it (``by_its_agent``): an agent that
    withdraws its work before a verdict fails as if rejected.

    False, changing nothing, when the attempt is no longer live or no longer the task's
    current attempt (already withdrawn, rejected, approved): a close read twice withdraws
    once, and never the attempt that came after it.
    """
    with transaction.atomic():
        task, attempt = lock_task_and_attempt(attempt.pk)
        if not attempt.is_live or task.current_attempt_id != attempt.pk:
            return False
        # Counted under the task's lock, so two withdrawals cannot both be the last free one.
        earlier = Event.objects.filter(
            task=task,
            content_type=ContentType.objects.get_for_model(Task),
            object_id=task.pk,
            transition="withdraw",
        ).count()
        counts = by_its_agent or earlier >= WITHDRAWALS_FREE
        used = f"({task.failed_attempts + 1} of {task.max_attempts} attempts used)"
        if by_its_agent:
            why = f"; the attempt's own agent closed it, so this attempt counts as failed {used}"
        elif counts:
            why = (
                f"; this task's pull requests were closed {earlier + 1} times, more than the"
                f" {WITHDRAWALS_FREE} that are free, so this attempt counts as failed {used}"
            )
        else:
            why = ""
        reason = reason[: 2000 - len(why)] + why
        fire(attempt, "withdraw", actor=None, reason=reason, end_reason=reason, counts=counts)
        extra = {"attempt": attempt.number} | ({"counts": True} if counts else {})
        fire(task, "withdraw", actor=None, reason=reason, extra=extra, counts=counts)
    return True


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
    it is byte for byte the approved change that came back, under the rules of
    ``tasks.landing.approval_to_carry``; the reason says why an earlier approval was or
    was not carried);
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
            return attempt_gates_failed(attempt=attempt, reason=f"{brief.GATES}{reason}")
        carry = approval_to_carry(attempt)
        if carry.carries and lock_landing_mode(attempt.task).lands:
            return attempt_requeue(attempt=attempt, carry=carry)
        passed = ", ".join(run.gate for run in runs) or "no gates configured"
        reason = f"gates passed: {passed}" + (f"; {carry.why}" if carry.earlier else "")
        return attempt_gates_passed(attempt=attempt, reason=reason)
