"""Reads for the landing faces: a project's queue, its recent batches, its pace.

The API and the page show the same picture (``landing_overview``), each in a bounded
number of queries whatever the length of the queue: the queue, the batches, one count,
and the lander's back-off.
"""

from datetime import timedelta

from django.db.models import Count, F, Min, Q, Sum
from django.utils import timezone

from landing.models import Batch, FlakyTest, Lander, LanderState
from projects.models import Event, Project
from tasks.landing import landing_queue, revert_queue
from tasks.models import Attempt, AttemptState, Task, TaskState

QUEUE_SHOWN = 200  # a queue longer than this is shown from its head; ``queued`` counts it all
BATCHES_SHOWN = 20
REVERTS_SHOWN = 50
FLAKY_SHOWN = 100
FLAKE_RATE_BATCHES = 100  # the flake rate is read over the project's last so many batches


def queued_keys(project_id: int) -> list[str]:
    """The keys of the tasks the project's landing holds, in landing order: the changes
    queued to land, then the reverts queued (what a change of ``landing.mode`` strands)."""
    return [
        *landing_queue(project_id).values_list("task__key", flat=True),
        *revert_queue(project_id).values_list("task__key", flat=True),
    ]


def queue_rows(project: Project, *, limit: int = QUEUE_SHOWN) -> list[dict]:
    """The project's queued changes in the order they land, each with its position (1 first)."""
    return [
        {
            "position": position,
            "task": attempt.task,
            "attempt": attempt,
            "commit": attempt.landing.get("commit", ""),
            "queued_at": attempt.queued_at,
            "state": attempt.landing.get("state", "queued"),
            "batch": attempt.landing.get("batch"),
            "reason": attempt.landing.get("reason", ""),
            "lane": "fast" if attempt.fast_at else "normal",
            "fast": {**attempt.landing.get("fast", {}), "at": attempt.fast_at}
            if attempt.fast_at
            else None,
        }
        for position, attempt in enumerate(landing_queue(project.pk)[:limit], start=1)
    ]


def revert_rows(project: Project, *, limit: int = REVERTS_SHOWN) -> list[dict]:
    """The project's queued reverts of landed changes, in the order they land (each alone,
    in its turn or the fast lane; docs/landing.md, "Undo")."""
    rows = []
    for attempt in revert_queue(project.pk)[:limit]:
        revert = attempt.landing.get("revert") or {}
        rows.append(
            {
                "task": attempt.task,
                "reverts": revert.get("reverts", ""),
                "by": revert.get("by"),
                "reason": revert.get("reason", ""),
                "asked_at": attempt.revert_at,
                "state": revert.get("state", "queued"),
                "why": revert.get("why", ""),
                "lane": "fast" if attempt.fast_at else "normal",
            }
        )
    return rows


def recent_batches(project: Project, *, limit: int = BATCHES_SHOWN) -> list[Batch]:
    """The project's last ``limit`` batches, newest first."""
    return list(Batch.objects.filter(project=project).order_by("-pk")[:limit])


def landed_in_last_hour(project: Project, *, now=None) -> int:
    """How many changes reached the target in the last hour (their ``land`` events)."""
    since = (now or timezone.now()) - timedelta(hours=1)
    return Event.objects.filter(
        project=project, task__isnull=False, transition="land", created_at__gte=since
    ).count()


def flaky_block(project: Project, *, limit: int = FLAKY_SHOWN) -> dict:
    """The project's flaky and quarantined tests (quarantined first, then the latest seen),
    and its flake rate: of the trees its last ``FLAKE_RATE_BATCHES`` batches judged, the
    share at which a test failed and then passed (None before any was judged)."""
    recent = Batch.objects.filter(project=project).order_by("-pk")[:FLAKE_RATE_BATCHES]
    totals = Batch.objects.filter(pk__in=recent.values("pk")).aggregate(
        runs=Sum("verify_runs"), reruns=Sum("reruns"), flaked=Sum("flaked")
    )
    judged = (totals["runs"] or 0) - (totals["reruns"] or 0)
    tests = FlakyTest.objects.filter(project=project).select_related("quarantined_by")
    counts = tests.aggregate(total=Count("pk"), quarantined=Count("pk", filter=Q(quarantined=True)))
    return {
        "rate": round((totals["flaked"] or 0) / judged, 4) if judged else None,
        "judged": judged,
        "flaked": totals["flaked"] or 0,
        "tests": list(tests[:limit]),
        "count": counts["total"],
        "quarantined": counts["quarantined"],
    }


def metric_figures(*, now) -> dict:
    """What /metrics reads of the merge queues at each scrape: quarantined tests, and the
    age of the change waiting longest, by project (two queries)."""
    rows = (
        FlakyTest.objects.filter(quarantined=True)
        .values("project__slug")
        .annotate(count=Count("pk"))
    )
    oldest = (
        Attempt.objects.filter(
            task__state=TaskState.APPROVED,
            task__current_attempt=F("pk"),
            state=AttemptState.APPROVED,
            queued_at__isnull=False,
        )
        .values("task__project__slug")
        .annotate(first=Min("queued_at"))
    )
    return {
        "factory_landing_quarantined": {(row["project__slug"],): row["count"] for row in rows},
        "factory_landing_oldest_queued_seconds": {
            (row["task__project__slug"],): max(0.0, (now - row["first"]).total_seconds())
            for row in oldest
        },
    }


def lander_block(project: Project) -> dict:
    """Whether the project's lander is backing off after a batch erred (ADR 0020): why, since
    when, the target's tip and queue head it waits to see change, and when it looks again;
    and whether a manager paused landing: who, why, since and until when."""
    lander = (
        Lander.objects.filter(project=project)
        .select_related("head__task", "project", "paused_by")
        .first()
    )
    if lander is None:
        lander = Lander(project=project)
    return {
        "object": lander,
        "state": lander.state,
        "reason": lander.reason,
        "since": lander.since,
        "tip": lander.tip,
        "head": lander.head.task.key if lander.head is not None else None,
        "batch": lander.batch_id,
        "verified": lander.verified,
        "wake_at": lander.wake_at,
        "backing_off": lander.state == LanderState.BACKING_OFF,
        "paused": {
            "by": lander.paused_by.get_username() if lander.paused_by_id else None,
            "reason": lander.pause_reason,
            "since": lander.paused_at,
            "until": lander.paused_until,
        }
        if lander.paused
        else None,
    }


def landing_overview(project: Project) -> dict:
    """Everything the landing faces show of ``project``."""
    queue = queue_rows(project)
    queued = len(queue) if len(queue) < QUEUE_SHOWN else landing_queue(project.pk).count()
    return {
        "landing": project.landing_settings,
        "target": project.landing_target,
        "lander": lander_block(project),
        "queue": queue,
        "queued": queued,
        "reverts": revert_rows(project),
        "batches": recent_batches(project),
        "landed_per_hour": landed_in_last_hour(project),
        "flaky": flaky_block(project),
    }


def task_in(project: Project, key: str) -> Task:
    """The task ``key`` of ``project``; ``Task.DoesNotExist`` (a 404) when there is none
    (another project's task among them: it is reached through its own project)."""
    return Task.objects.select_related("project").get(project=project, key=key)
