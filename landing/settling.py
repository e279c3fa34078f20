"""What a stopped lander left (docs/landing.md, "A lander that dies"): its batch still
active. The next lander holding the project's lock (so the one that left it is gone), or
a manager's dequeue, which takes the lock too (``landing.services``), settles it from git
alone, or from the host for a batch landing through a pull request (ADR 0041): landed if
what it was about to push reached the target, else abandoned, its changes still queued.

Also here, because the lander writes them as the settling does: how a change of a batch
is noted on its attempt without moving it (``note``), and how many batches in a row ended
without a verdict with it first (``errors_in_a_row``, ADR 0033).
"""

from django.utils import timezone

from landing import git, through_host
from landing.models import ACTIVE_BATCH_STATES, REVERT, Batch, BatchState
from landing.states import move
from projects import metrics
from projects.models import Project
from tasks.landing import attempt_landing_note, attempt_revert_note, task_land, task_revert_land
from tasks.models import Attempt


def settle_dead_batches(project: Project) -> int:
    """Settle the batches a dead lander left active (called holding the lock, so their
    lander is gone): landed if the commit it was about to push is on the target, else
    abandoned with its changes still queued. Returns how many it settled."""
    dead = list(Batch.objects.filter(project=project, state__in=ACTIVE_BATCH_STATES))
    # Only a batch that was pushing may be on the target: git is asked about those alone,
    # and the host about those that were landing through a pull request (ADR 0041).
    path = None
    if any(batch.state == BatchState.PUSHING and not batch.through_host for batch in dead):
        path = git.fetch(project)
    for batch in dead:
        if batch.state == BatchState.PUSHING and batch.through_host:
            planned = through_host.merged(project, batch)
            pushed = bool(planned)
        else:
            tip = git.tip(path, batch.target) if batch.state == BatchState.PUSHING else None
            pushed = bool(
                batch.state == BatchState.PUSHING
                and batch.result
                and tip is not None
                and git.is_ancestor(path, batch.result, tip)
            )
            planned = {item["attempt"]: item["built"] for item in batch.plan} if pushed else {}
        attempts = Attempt.objects.select_related("task").in_bulk(
            [change["attempt"] for change in batch.changes]
        )
        for change in batch.changes:
            attempt = attempts[change["attempt"]]
            if change["attempt"] in planned and batch.method == REVERT:
                task_revert_land(attempt=attempt, commit=planned[change["attempt"]], batch=batch.pk)
                change["outcome"] = "reverted"
            elif change["attempt"] in planned:
                task_land(
                    attempt=attempt,
                    commit=planned[change["attempt"]],
                    batch=batch.pk,
                    seconds=(timezone.now() - batch.started_at).total_seconds(),
                )
                change["outcome"] = "landed"
            elif change.get("outcome", "queued") in ("queued", "landing"):
                # Its lander died before a verdict: the first change counts it (a change
                # that kills every lander that verifies it must not hold the queue forever).
                first = change is batch.changes[0] and not pushed
                errors = {"errors": errors_in_a_row(attempt) + 1} if first else {}
                still = note(batch, attempt, state="queued", batch=None, **errors)
                change["outcome"] = "queued" if still else "dequeued"
        pushing = batch.state == BatchState.PUSHING
        move(
            batch,
            "settle" if pushing else "abandon",
            **({"pushed": pushed} if pushing else {}),
            why=(
                "its lander stopped after pushing; settled from the "
                + ("host: its pull request is merged" if batch.through_host else "target")
            )
            if pushed
            else "its lander stopped before pushing; its changes stay queued",
        )
        batch.ended_at = timezone.now()
        batch.save(update_fields=["changes", "ended_at"])
        metrics.landing_batch_ended(project=project.slug, state=batch.state, runs=batch.verify_runs)
    return len(dead)


def note(of: Batch, attempt: Attempt, **fields) -> bool:
    """Record where a change of batch ``of`` is without moving it: a queued change's
    landing record, or a queued revert's (``revert``), whose ``reason`` is the manager's."""
    if of.method != REVERT:
        return attempt_landing_note(attempt=attempt, **fields)
    fields.pop("errors", None)  # the head's errors in a row count queued changes only
    if "reason" in fields:
        fields["why"] = fields.pop("reason")
    return attempt_revert_note(attempt=attempt, **fields)


def errors_in_a_row(attempt: Attempt) -> int:
    """How many batches in a row ended without a verdict with ``attempt`` first."""
    return int((attempt.landing or {}).get("errors") or 0)
