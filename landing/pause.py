"""A manager's pause of a project's landing (docs/landing.md, "Pause and resume").

While paused, the lander starts no batch (a batch already pushing finishes); approvals keep
queueing. ``paused`` is asked at every wake-up and before each batch, from the database
alone. A pause given an end (``paused_until``) is lifted there once it has passed, by the
system; a manager lifts one sooner with ``landing.services.landing_resume``. Pausing and
lifting are each an Event on the lander (``pause``, ``unpause``), and a lifted pause wakes
the lander once.
"""

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from landing.models import Lander
from projects.models import Event
from projects.queue import enqueue_on_commit
from tasks.landing import LAND_JOB

PAUSED, NOT_PAUSED = "paused", "landing"  # the states an Event of a pause moves between


def paused(project, *, now: datetime | None = None) -> bool:
    """Whether the project's landing is paused now, asked by the lander: a pause whose end
    has passed is lifted here (the lander asking goes on, so none is woken)."""
    lander = Lander.objects.filter(project=project, paused_at__isnull=False).first()
    if lander is None:
        return False
    now = now or timezone.now()
    if lander.paused_until is None or lander.paused_until > now:
        return True
    with transaction.atomic():
        lander = Lander.objects.select_for_update(no_key=True, of=("self",)).get(pk=lander.pk)
        if lander.paused and lander.paused_until is not None and lander.paused_until <= now:
            ended = lander.paused_until.isoformat()
            lift(lander, actor=None, reason=f"the pause ended at {ended}", wake=False)
    return False


def lift(lander: Lander, *, actor, reason: str, wake: bool = True) -> None:
    """End ``lander``'s pause (locked by the caller) and wake it once, after the commit."""
    extra = {
        "paused_by": lander.paused_by.get_username() if lander.paused_by_id else None,
        "paused_at": lander.paused_at.isoformat(),
        "was": lander.pause_reason[:2000],
    }
    lander.paused_at = lander.paused_by = lander.paused_until = None
    lander.pause_reason = ""
    lander.save(update_fields=["paused_at", "paused_by", "pause_reason", "paused_until"])
    Event.record(
        lander,
        actor=actor,
        transition="unpause",
        from_state=PAUSED,
        to_state=NOT_PAUSED,
        reason=reason,
        extra=extra,
    )
    if wake:
        enqueue_on_commit(LAND_JOB, lander.project_id)
