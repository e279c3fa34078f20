"""Reads for tasks and attempts: what a caller may see, and what an agent may claim."""

from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal

from django.db.models import Count, Exists, F, Min, OuterRef, QuerySet

from evidence.models import Evidence, decisive
from evidence.viewers import interdiff_view
from projects.kinds import Kind
from projects.selectors import project_ids_for
from projects.verify import LANDING_BATCH_MAX
from tasks.landing import approval_to_carry, change_id_of, queue_position
from tasks.models import Attempt, AttemptState, Label, Task, TaskState
from tasks.usage import month_start, usage_sum


def claimable_tasks(*, project_ids: Iterable[int], labels: Iterable[str] = ()) -> QuerySet[Task]:
    """Ready tasks an agent may claim, best first (priority, then age).

    A task is claimable when it is ready, all its dependencies are done, it has attempts
    left, and it carries every label asked for. The order matches the
    ``task_claim_order`` index, so the first unlocked row is found without a sort.
    (Tasks whose lease ran out are made ready first: see ``overdue_attempt_ids``.)
    """
    open_dependency = Task.depends_on.through.objects.filter(from_task=OuterRef("pk")).exclude(
        to_task__state=TaskState.DONE
    )
    tasks = (
        Task.objects.filter(project_id__in=list(project_ids), state=TaskState.READY)
        .filter(failed_attempts__lt=F("max_attempts"))
        .exclude(Exists(open_dependency))
    )
    for name in set(labels):
        tasks = tasks.filter(
            Exists(Label.tasks.through.objects.filter(task=OuterRef("pk"), label__name=name))
        )
    return tasks.order_by("-priority", "created_at", "pk")


def overdue_attempt_ids(*, project_ids: Iterable[int] | None = None, now: datetime) -> list[int]:
    """Running attempts whose lease has run out (uses the ``attempt_lease_expiry`` index)."""
    attempts = Attempt.objects.filter(state=AttemptState.RUNNING, lease_expires_at__lte=now)
    if project_ids is not None:
        attempts = attempts.filter(task__project_id__in=list(project_ids))
    return list(attempts.order_by("lease_expires_at").values_list("pk", flat=True))


def visible_tasks(user) -> QuerySet[Task]:
    """Tasks in the projects ``user`` is a member of; everything else does not exist for them."""
    return Task.objects.filter(project_id__in=project_ids_for(user))


def task_for(user, key: str) -> Task:
    """The task ``key`` if ``user`` may see it; ``Task.DoesNotExist`` (a 404) otherwise."""
    return visible_tasks(user).select_related("project", "spec", "current_attempt").get(key=key)


def attempt_for(user, attempt_id) -> Attempt:
    """The attempt if it is in one of ``user``'s projects; ``Attempt.DoesNotExist`` otherwise."""
    return (
        Attempt.objects.filter(task__project_id__in=project_ids_for(user))
        .select_related("task__project", "agent", "spec_version__spec", "reviewed_by")
        .get(pk=attempt_id)
    )


def commented_diff(evidence: Iterable):
    """The diff line comments are written against, of an attempt's evidence (in id order):
    the decisive one (the runner's or a verifier's when there is one, else the agent's),
    the newest of those; None without a diff."""
    rows = decisive([e for e in evidence if e.kind == Kind.DIFF])
    return rows[-1] if rows else None


def approval_before(attempt: Attempt | None, evidence: Iterable) -> dict | None:
    """What a reviewer compares ``attempt`` with: the latest earlier attempt of its task a
    reviewer approved, whose reviewer, whether this is the same change byte for byte, why
    the approval was or was not carried (``tasks.landing.approval_to_carry``), and what
    differs between the two diffs (``evidence.viewers.interdiff_view``). None when no
    earlier attempt was approved or either has no diff. ``evidence`` is ``attempt``'s."""
    if attempt is None:
        return None
    carry = approval_to_carry(attempt)
    earlier = carry.earlier
    if earlier is None:
        return None
    diff = commented_diff(evidence)
    theirs = commented_diff(Evidence.objects.filter(attempt=earlier, kind=Kind.DIFF).order_by("pk"))
    if diff is None or theirs is None:
        return None
    mine, approved = change_id_of(attempt), (earlier.landing or {}).get("change_id")
    return {
        "earlier": earlier,
        "reviewer": earlier.reviewed_by,
        "measured": bool(mine and approved),
        "same_change": bool(mine) and mine == approved,
        "why": carry.why if attempt.state == AttemptState.PASSED else "",
        "approved_diff": theirs,
        "diff": diff,
        "interdiff": interdiff_view(theirs, diff),
    }


# A batch holds at most this many changes: the partners a task page shows are bounded.
PARTNERS_SHOWN = LANDING_BATCH_MAX


def landing_of(task: Task, attempt: Attempt | None) -> dict | None:
    """What the task page's Landing panel shows of ``attempt``'s change in the merge queue:
    its landing block, its position while queued, the other changes of its last batch and
    where it landed; None when the attempt never joined the queue. At most two queries."""
    if attempt is None or not attempt.landing:
        return None
    landing = attempt.landing
    queued = task.state == TaskState.APPROVED and task.current_attempt_id == attempt.pk
    position = None
    if queued and attempt.queued_at is not None:
        position = queue_position(attempt)
    partners = []
    if landing.get("batch") is not None:
        partners = list(
            Attempt.objects.filter(
                task__project_id=task.project_id, landing__batch=landing["batch"]
            )
            .exclude(pk=attempt.pk)
            .select_related("task")
            .order_by("queued_at", "pk")[:PARTNERS_SHOWN]
        )
    return {
        **landing,
        "queued": queued,
        "position": position,
        "partners": partners,
        "landed_commit": task.landed_commit if landing.get("state") == "landed" else "",
    }


def metric_figures(*, now: datetime) -> dict:
    """The tasks' gauges for /metrics (``projects.metrics.GAUGES``), from one grouped query:
    every state of each project that has tasks (0 where none), the changes queued to land,
    and the age of the oldest submission waiting for review (the review queue's order)."""
    rows = (
        Task.objects.order_by()
        .values_list("project__slug", "state")
        .annotate(count=Count("pk"), oldest=Min("current_attempt__submitted_at"))
    )
    tasks, queued, review = {}, {}, {}
    for slug, state, count, oldest in rows:
        if (slug,) not in queued:  # the project's first row: each of its figures starts at 0
            tasks.update({(slug, s): 0 for s in TaskState.values})
            queued[(slug,)] = review[(slug,)] = 0
        tasks[(slug, state)] = count
        if state == TaskState.APPROVED:
            queued[(slug,)] = count
        if state == TaskState.IN_REVIEW and oldest is not None:
            review[(slug,)] = max(0.0, (now - oldest).total_seconds())
    return {
        "factory_tasks": tasks,
        "factory_landing_queued": queued,
        "factory_review_oldest_seconds": review,
    }


def month_spend(*, project_ids: Iterable[int], now: datetime) -> dict[int, Decimal]:
    """What the attempts started in ``now``'s month (UTC) cost, by project, as their
    agents reported it or the price table priced it (what is not a number counts 0); a project with no attempt this
    month is absent. One query."""
    rows = (
        Attempt.objects.filter(task__project_id__in=project_ids, started_at__gte=month_start(now))
        .values("task__project_id")
        .annotate(spent=usage_sum("cost_usd") + usage_sum("priced_cost_usd"))
        .values_list("task__project_id", "spent")
    )
    return dict(rows)
