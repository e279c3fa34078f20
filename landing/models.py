"""A landing batch: what one lander tried to put on a project's target branch at once."""

from django.db import models
from django.utils import timezone

from projects.models import Project


class BatchState(models.TextChoices):
    BUILDING = "building"
    VERIFYING = "verifying"
    PUSHING = "pushing"  # the commit point: ``result`` may be on the target from here on
    LANDED = "landed"  # some or all of its changes are on the target
    RETURNED = "returned"  # none landed: each came back (a conflict, failing tests)
    ERROR = "error"  # the machine's trouble: its changes stay queued
    ABANDONED = "abandoned"  # its lander died before pushing: its changes stay queued


ACTIVE_BATCH_STATES = [BatchState.BUILDING, BatchState.VERIFYING, BatchState.PUSHING]


class Batch(models.Model):
    """One lander's run over up to ``batch_max`` queued changes, in approval order.

    Guarantees: ``plan`` (which commit carries which attempt) and ``result`` are written
    before the push, so a lander killed at any point leaves a batch another lander can
    settle from git alone: landed if ``result`` is on the target, else abandoned with its
    changes still queued. ``changes`` records each change's outcome; the counts say what
    the batch cost (verify runs, bisect steps, pushes tried).
    """

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="+")
    state = models.CharField(max_length=16, choices=BatchState.choices, default=BatchState.BUILDING)
    target = models.CharField(max_length=200)
    method = models.CharField(max_length=16)
    base = models.CharField(max_length=64, blank=True, help_text="The target's tip built on.")
    result = models.CharField(max_length=64, blank=True, help_text="The commit pushed.")
    tree = models.CharField(max_length=64, blank=True, help_text="The pushed commit's tree.")
    changes = models.JSONField(
        default=list,
        blank=True,
        help_text="[{attempt, task, commit, built, outcome, reason}] in approval order.",
    )
    plan = models.JSONField(
        default=list, blank=True, help_text="[{attempt, built}] to land, written before the push."
    )
    verify_runs = models.PositiveSmallIntegerField(default=0)
    bisect_steps = models.PositiveSmallIntegerField(default=0)
    pushes = models.PositiveSmallIntegerField(default=0)
    reason = models.TextField(blank=True)
    seconds = models.FloatField(default=0)
    started_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-pk"]
        verbose_name_plural = "batches"
        indexes = [models.Index(fields=["project", "state"], name="landing_batch_project_state")]

    def __str__(self) -> str:
        return f"batch {self.pk} ({self.state})"
