"""The reconciler: what brings stuck work forward, and the housekeeping beside it.

The database is the truth; a lost job message or a dead worker leaves work the
database still shows as unfinished. ``reconcile`` finds it and moves it on;
``housekeeping`` removes what nothing needs any more. Celery beat runs each on its own
schedule (``tasks.jobs``); ``manage.py reconcile`` runs both by hand.
"""

from django.conf import settings

from evidence.models import GateRunState
from evidence.services import gate_runs_reconcile
from projects.queue import enqueue
from projects.tokens import tokens_delete_expired
from runner.mirror import sweep
from tasks.attempts import attempt_checks_conclude, leases_expire_overdue
from tasks.landing import LAND_JOB
from tasks.models import Attempt, AttemptState, Task, TaskState


def reconcile() -> dict:
    """Bring every unfinished piece of work forward from what the database says.

    Expires overdue leases; re-queues gate runs whose worker died and re-dispatches
    queued runs whose job never started (``evidence.services.gate_runs_reconcile``);
    concludes checking attempts whose gates have all finished; wakes the lander of each
    project with approved work (or a revert) queued to land. Safe to run at any time and from several
    places at once.
    """
    counts = {"leases_expired": leases_expire_overdue(), **gate_runs_reconcile()}
    checking = Attempt.objects.filter(state=AttemptState.CHECKING).exclude(
        gate_runs__state__in=[GateRunState.QUEUED, GateRunState.RUNNING]
    )
    counts["attempts_concluded"] = 0
    for attempt in checking:
        if attempt_checks_conclude(attempt=attempt).state != AttemptState.CHECKING:
            counts["attempts_concluded"] += 1
    # A lander that died, or a wake-up lost with the broker, leaves approved work queued:
    # wake each project's lander (one works at a time; the others find it busy and stop).
    queued = list(
        Task.objects.filter(state=TaskState.APPROVED).values_list("project_id", flat=True)
    )
    queued += Attempt.objects.filter(
        revert_at__isnull=False, task__state=TaskState.DONE
    ).values_list("task__project_id", flat=True)
    counts["landers_woken"] = 0
    for project_id in sorted(set(queued)):
        enqueue(LAND_JOB, project_id)
        counts["landers_woken"] += 1
    return counts


def housekeeping() -> dict:
    """Remove what nothing needs any more: expired API tokens (the presented token's expiry
    is enforced on each request; this only deletes the rows), and runner workspaces older
    than a runner may run, left by a runner killed mid-run on this machine. Stuck work is
    ``reconcile``'s. Safe to run at any time and from several places at once.
    """
    return {
        "tokens_deleted": tokens_delete_expired(),
        "workspaces_swept": sweep(
            older_than=settings.FACTORY_RUNNER_TIME_LIMIT + settings.FACTORY_GATE_GRACE_SECONDS
        ),
    }
