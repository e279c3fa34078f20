"""An import of a team's files, kept from its dry run to its application."""

from django.conf import settings
from django.db import models
from django.utils import timezone
from django_fsm import FSMField, transition

from projects.models import Project
from projects.roles import MANAGER, SYSTEM


class ImportState(models.TextChoices):
    CHECKED = "checked", "Checked (dry run)"
    APPLIED = "applied", "Applied"
    EXPIRED = "expired", "Expired (not applied in time)"


class ImportRun(models.Model):
    """One upload of a team's files for a project, in one format, under one origin name
    (``interop.origins``: the rows it writes carry ``<format>:<origin_name>:<id>``).

    ``checked``: read and planned in a transaction that was rolled back; ``report`` says what
    applying it would create, update, leave unchanged and skip, and ``upload`` keeps the
    bytes so that a manager who read the report can apply exactly those. ``applied``: written,
    in one transaction, with one Event; ``report`` is what was done and the upload is let go.
    ``expired``: checked, but not applied within ``FACTORY_IMPORT_KEEP_DAYS``; the upload is
    let go and the report kept, so the run still says what it would have done.
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="imports")
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    format = models.CharField(max_length=16)
    name = models.CharField(max_length=255, help_text="The uploaded file's name.")
    origin_name = models.CharField(
        max_length=64,
        help_text="The name its rows' origins carry (<format>:<origin name>:<id>): given at"
        " upload, else the file's name less its extension (interop.origins).",
    )
    sha256 = models.CharField(max_length=64)
    size = models.PositiveIntegerField()
    upload = models.BinaryField(editable=False, help_text="The bytes, until applied.")
    mapping = models.JSONField(default=dict, blank=True, help_text="spec-kit criterion proofs.")
    report = models.JSONField(default=dict, editable=False)
    state = FSMField(default=ImportState.CHECKED, choices=ImportState.choices, protected=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    applied_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"{self.project.slug} import #{self.pk} ({self.format})"

    def audit_scope(self) -> tuple[int, None]:
        return self.project_id, None

    @property
    def fsm_project_id(self) -> int:
        return self.project_id

    @transition(
        field=state, source=ImportState.CHECKED, target=ImportState.APPLIED, permission=MANAGER
    )
    def apply(self, report: dict):
        self.report = report
        self.upload = b""
        self.applied_at = timezone.now()

    @transition(
        field=state, source=ImportState.CHECKED, target=ImportState.EXPIRED, permission=SYSTEM
    )
    def expire(self):
        self.upload = b""
