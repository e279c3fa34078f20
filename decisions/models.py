"""Specs (versioned requirements with executable acceptance criteria) and decision records.

A spec has at most one accepted version at a time (a database constraint); a task's
attempt pins the version current when it was claimed. A decision is proposed,
then accepted or rejected; accepting one that amends a spec creates and accepts
the new spec version, and accepting one that names earlier decisions in
``supersedes`` moves them to superseded. All of it through ``decisions.services``.
"""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django_fsm import ConcurrentTransitionMixin, FSMField, transition

from projects.models import NumberedInProject, Project
from projects.roles import MANAGER, Role, Rule, has_role, role_rule


class Spec(NumberedInProject):
    """A requirement, identified by ``FM-S3``, whose content lives in its versions."""

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="specs")
    title = models.CharField(max_length=200)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    def current_version(self) -> "SpecVersion | None":
        return self.versions.filter(state=SpecVersionState.ACCEPTED).first()


class SpecVersionState(models.TextChoices):
    DRAFT = "draft"
    ACCEPTED = "accepted"
    SUPERSEDED = "superseded"


class SpecVersion(ConcurrentTransitionMixin, models.Model):
    """One version of a spec's body and criteria. Accepted versions are never edited."""

    spec = models.ForeignKey(Spec, on_delete=models.PROTECT, related_name="versions")
    number = models.PositiveIntegerField(editable=False)
    body = models.TextField(help_text="Markdown.")
    state = FSMField(
        default=SpecVersionState.DRAFT, choices=SpecVersionState.choices, protected=True
    )
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    source_decision = models.ForeignKey(
        "Decision",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="amended_versions",
        help_text="The decision whose acceptance created this version.",
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    accepted_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["spec", "number"]
        constraints = [
            models.UniqueConstraint(fields=["spec", "number"], name="spec_version_number_unique"),
            models.UniqueConstraint(
                fields=["spec"],
                condition=Q(state="accepted"),
                name="spec_one_accepted_version",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.spec.key} v{self.number}"

    @property
    def fsm_project_id(self) -> int:
        return self.spec.project_id

    def audit_scope(self) -> tuple[int, None]:
        return self.spec.project_id, None

    @transition(
        field=state,
        source=SpecVersionState.DRAFT,
        target=SpecVersionState.ACCEPTED,
        permission=MANAGER,
    )
    def accept(self):
        self.accepted_at = timezone.now()

    @transition(
        field=state,
        source=SpecVersionState.ACCEPTED,
        target=SpecVersionState.SUPERSEDED,
        permission=MANAGER,
    )
    def supersede(self):
        pass


class Check(models.TextChoices):
    TESTS = "tests", "Tests that pass"
    EVIDENCE = "evidence", "Evidence of a kind"
    REVIEW = "review", "A reviewer's judgement"


class Criterion(models.Model):
    """An acceptance criterion and the check that proves it.

    ``proof`` is ``{"check": "tests", "select": "tests/test_claim.py::*"}``,
    ``{"check": "evidence", "kind": "screenshot"}`` or ``{"check": "review"}``.
    """

    spec_version = models.ForeignKey(SpecVersion, on_delete=models.CASCADE, related_name="criteria")
    key = models.CharField(max_length=32)
    text = models.TextField()
    proof = models.JSONField(help_text="The check that proves it.")
    position = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["spec_version", "position"]
        constraints = [
            models.UniqueConstraint(fields=["spec_version", "key"], name="criterion_key_unique"),
        ]

    def __str__(self) -> str:
        return self.key

    @property
    def check_kind(self) -> str:
        return self.proof.get("check", "")


class DecisionState(models.TextChoices):
    PROPOSED = "proposed"
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    SUPERSEDED = "superseded"


def _decider_refusal(decision, user):
    if user is None:
        return ("permission_denied", "a person decides, not the system")
    if decision.amendments.exists():
        if not has_role(user, decision.project_id, Role.MANAGER):
            return ("permission_denied", f"{decision} amends a spec; only a manager may decide it")
    elif not has_role(user, decision.project_id, Role.REVIEWER, Role.MANAGER):
        return ("permission_denied", "deciding needs the reviewer or manager role in the project")
    if user.pk in decision.authors():
        return ("own_work", f"you proposed {decision}; another reviewer or manager must decide it")
    return None


# Reviewers and managers decide; a decision that amends a spec is for managers only; and
# separation of duties: never the one who proposed it, nor the agent of the attempt it
# was proposed in (whoever's account carried the proposal through).
DECIDER = Rule(_decider_refusal, "decider")
SUPERSEDER = role_rule(Role.REVIEWER, Role.MANAGER)


class Decision(ConcurrentTransitionMixin, NumberedInProject):
    """An architecture/product decision record, ``FM-D7``.

    The rejected alternatives are part of the record. Guarantees: once decided, the
    text never changes; only accepted decisions reach an agent's context.
    """

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="decisions")
    title = models.CharField(max_length=200)
    context = models.TextField(help_text="The situation and forces that call for a decision.")
    decision = models.TextField(help_text="What was decided.")
    consequences = models.TextField(blank=True)
    alternatives = models.JSONField(
        default=list,
        blank=True,
        help_text='Alternatives considered: [{"option": "...", "reason": "why not"}].',
    )
    state = FSMField(default=DecisionState.PROPOSED, choices=DecisionState.choices, protected=True)
    proposed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="proposed_decisions"
    )
    proposed_in = models.ForeignKey(
        "tasks.Attempt",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="decisions",
        help_text="The attempt during which an agent proposed it.",
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    verdict_reason = models.TextField(blank=True, help_text="Why it was accepted or rejected.")
    supersedes = models.ManyToManyField(
        "self", symmetrical=False, blank=True, related_name="superseded_by"
    )
    tasks = models.ManyToManyField("tasks.Task", blank=True, related_name="decisions")
    specs = models.ManyToManyField(Spec, blank=True, related_name="decisions")
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    @property
    def fsm_project_id(self) -> int:
        return self.project_id

    @property
    def verdict(self) -> str:
        """What its decider said: "accepted" (also when later superseded), "rejected" or ""."""
        if self.state in (DecisionState.ACCEPTED, DecisionState.SUPERSEDED):
            return "accepted"
        return "rejected" if self.state == DecisionState.REJECTED else ""

    def audit_scope(self) -> tuple[int, None]:
        return self.project_id, None

    def authors(self) -> set[int]:
        """Who may not decide this decision: its proposer and its attempt's agent."""
        authors = {self.proposed_by_id}
        if self.proposed_in_id is not None:
            authors.add(self.proposed_in.agent_id)
        return authors

    @transition(
        field=state,
        source=DecisionState.PROPOSED,
        target=DecisionState.ACCEPTED,
        permission=DECIDER,
    )
    def accept(self, by, verdict_reason: str):
        self.decided_by = by
        self.decided_at = timezone.now()
        self.verdict_reason = verdict_reason

    @transition(
        field=state,
        source=DecisionState.PROPOSED,
        target=DecisionState.REJECTED,
        permission=DECIDER,
    )
    def reject(self, by, verdict_reason: str):
        self.decided_by = by
        self.decided_at = timezone.now()
        self.verdict_reason = verdict_reason

    @transition(
        field=state,
        source=DecisionState.ACCEPTED,
        target=DecisionState.SUPERSEDED,
        permission=SUPERSEDER,
    )
    def supersede(self):
        pass


class SpecAmendment(models.Model):
    """What a decision changes in a spec: the new body and criteria, based on one version.

    Accepting the decision turns this into the spec's next accepted version, unless the
    spec moved on from ``base_version`` in the meantime (then the decision is refused).
    """

    decision = models.ForeignKey(Decision, on_delete=models.CASCADE, related_name="amendments")
    spec = models.ForeignKey(Spec, on_delete=models.PROTECT, related_name="amendments")
    base_version = models.ForeignKey(
        SpecVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    body = models.TextField()
    criteria = models.JSONField(default=list)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["decision", "spec"], name="amendment_one_per_spec"),
        ]

    def __str__(self) -> str:
        return f"{self.decision.key} amends {self.spec.key}"
