"""Evidence (immutable, content-addressed files beside the attempt they prove) and gate runs."""

from django.conf import settings
from django.db import models
from django.db.models.signals import m2m_changed
from django.dispatch import receiver
from django.utils import timezone
from django_fsm import ConcurrentTransitionMixin, FSMField, transition

from projects.kinds import Kind
from projects.models import AppendOnlyError, AppendOnlyModel
from projects.roles import SYSTEM


class Provenance(models.TextChoices):
    AGENT = "agent", "Agent (self-reported)"
    VERIFIER = "verifier", "Verifier"
    RUNNER = "runner", "Runner"
    GATE = "gate", "Gate"
    HUMAN = "human", "Human"


# Who measured it, not who wrote about it: a verifier (a CI job with that role) or Factory
# Memory's own runner. A gate's report is the system's opinion of other evidence, so it
# is neither authoritative nor ever proof of a criterion.
AUTHORITATIVE_PROVENANCES = (Provenance.VERIFIER, Provenance.RUNNER)


def decisive(rows):
    """The evidence that decides, out of ``rows`` of one kind: the one rule of trust.

    Evidence written by a gate never proves anything. When authoritative evidence is
    among the rest, only the authoritative rows decide: self-reported evidence is shown
    beside it but can never outvote it. Otherwise the self-reported rows decide.
    Order is kept.
    """
    rows = [row for row in rows if row.provenance != Provenance.GATE]
    authoritative = [row for row in rows if row.provenance in AUTHORITATIVE_PROVENANCES]
    return authoritative or rows


def blob_name(sha256: str) -> str:
    """Where the bytes with this SHA-256 live in storage; equal bytes share one file."""
    return f"evidence/{sha256[:2]}/{sha256[2:4]}/{sha256}"


class Evidence(AppendOnlyModel):
    """A file that proves something about an attempt. Written once; never updated or deleted.

    The bytes live in storage under their SHA-256 (``blob_name``), so the same bytes are
    stored once however many attempts attach them. ``authoritative`` is derived from
    provenance: only a verifier's or the runner's evidence is authoritative, and
    ``decisive`` says which evidence a gate or a criterion may rest on.
    """

    attempt = models.ForeignKey("tasks.Attempt", on_delete=models.PROTECT, related_name="evidence")
    project = models.ForeignKey(
        "projects.Project",
        on_delete=models.PROTECT,
        related_name="+",
        editable=False,
        help_text="The attempt's project, kept on the row so a project's quota is one indexed sum.",
    )
    kind = models.CharField(max_length=16, choices=Kind.choices)
    file = models.FileField(max_length=255)
    sha256 = models.CharField(max_length=64, db_index=True)
    size = models.PositiveBigIntegerField()
    media_type = models.CharField(max_length=100)
    name = models.CharField(max_length=255, help_text="The file name the uploader gave.")
    provenance = models.CharField(max_length=16, choices=Provenance.choices)
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    criteria = models.ManyToManyField(
        "decisions.Criterion",
        blank=True,
        related_name="evidence",
        help_text="Criteria this evidence claims to prove.",
    )
    summary = models.JSONField(
        default=dict, blank=True, help_text="Parsed: JUnit totals, diff files…"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["attempt", "created_at", "id"]
        verbose_name_plural = "evidence"
        indexes = [
            # evidence_attach sums a project's usage per provenance from this index alone
            # (size is a key column, not INCLUDE, so SQLite can use it too).
            models.Index(fields=["project", "provenance", "size"], name="evidence_project_usage"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.sha256[:12]} ({self.provenance})"

    def save(self, *args, **kwargs):
        if self.project_id is None and self.attempt_id is not None:
            # The attempt's own model, through the relation: evidence sits below tasks.
            attempts = type(self).attempt.field.related_model.objects
            self.project_id = attempts.values_list("task__project_id", flat=True).get(
                pk=self.attempt_id
            )
        super().save(*args, **kwargs)

    @property
    def authoritative(self) -> bool:
        return self.provenance in AUTHORITATIVE_PROVENANCES


@receiver(m2m_changed, sender=Evidence.criteria.through)
def _criteria_are_written_once(sender, instance, action, reverse, **kwargs):
    """The criteria an evidence row claims to prove are part of the immutable record."""
    writing = action in ("pre_add", "pre_remove", "pre_clear")
    if writing and (reverse or not getattr(instance, "_criteria_open", False)):
        raise AppendOnlyError("the criteria of evidence are set once, when it is attached")


class GateRunState(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"


FINISHED_GATE_STATES = [GateRunState.PASSED, GateRunState.FAILED, GateRunState.ERROR]


class GateRun(ConcurrentTransitionMixin, models.Model):
    """One gate's check of one attempt. Exactly one per (attempt, gate).

    ``error`` means the gate itself crashed or timed out after its retries; it counts as
    a failure and its ``report`` holds the traceback.
    """

    attempt = models.ForeignKey("tasks.Attempt", on_delete=models.PROTECT, related_name="gate_runs")
    gate = models.CharField(max_length=50)
    params = models.JSONField(default=dict, blank=True)
    state = FSMField(default=GateRunState.QUEUED, choices=GateRunState.choices, protected=True)
    verdict = models.JSONField(default=dict, blank=True, help_text="The gate's findings.")
    summary = models.TextField(blank=True, help_text="The verdict in one line.")
    report = models.ForeignKey(
        Evidence, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    tries = models.PositiveSmallIntegerField(default=0)
    queued_at = models.DateTimeField(default=timezone.now, editable=False)
    dispatched_at = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text="When its job was last sent to the workers.",
    )
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["attempt", "id"]
        constraints = [
            models.UniqueConstraint(fields=["attempt", "gate"], name="gate_run_one_per_gate"),
        ]
        indexes = [
            models.Index(fields=["state", "queued_at"], name="gate_run_state"),
            models.Index(
                fields=["finished_at"], name="gate_run_finished"
            ),  # the dashboard's window
        ]

    def __str__(self) -> str:
        return f"{self.attempt} {self.gate}"

    @property
    def fsm_project_id(self) -> int:
        return self.attempt.task.project_id

    def audit_scope(self) -> tuple[int, int]:
        return self.attempt.task.project_id, self.attempt.task_id

    @property
    def counts_as_failure(self) -> bool:
        return self.state in (GateRunState.FAILED, GateRunState.ERROR)

    @transition(
        field=state, source=GateRunState.QUEUED, target=GateRunState.RUNNING, permission=SYSTEM
    )
    def start(self):
        self.tries += 1
        self.started_at = timezone.now()

    @transition(
        field=state, source=GateRunState.RUNNING, target=GateRunState.QUEUED, permission=SYSTEM
    )
    def requeue(self):
        self.queued_at = timezone.now()

    def _finish(self, verdict: dict, summary: str, report):
        self.verdict = verdict
        self.summary = summary
        self.report = report
        self.finished_at = timezone.now()

    @transition(
        field=state, source=GateRunState.RUNNING, target=GateRunState.PASSED, permission=SYSTEM
    )
    def succeed(self, verdict: dict, summary: str, report=None):
        self._finish(verdict, summary, report)

    @transition(
        field=state, source=GateRunState.RUNNING, target=GateRunState.FAILED, permission=SYSTEM
    )
    def fail(self, verdict: dict, summary: str, report=None):
        self._finish(verdict, summary, report)

    @transition(
        field=state, source=GateRunState.RUNNING, target=GateRunState.ERROR, permission=SYSTEM
    )
    def crash(self, verdict: dict, summary: str, report=None):
        self._finish(verdict, summary, report)
