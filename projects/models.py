"""Projects, who is in them with which role, and the record of everything that happens.

This is the kernel every other app builds on: a ``Project`` (whose slug prefixes every
key), its ``Membership`` rows (a user's roles in it), the ``Identity`` a single sign-on
finds its user by, and the ``Event`` audit trail,
append-only like everything that derives from ``AppendOnlyModel``. The tables keep the
names they had when these models lived in ``tasks`` (migration projects 0001).
"""

from django.conf import settings
from django.contrib.contenttypes.fields import GenericForeignKey
from django.contrib.contenttypes.models import ContentType
from django.core.validators import RegexValidator
from django.db import models
from django.db.models.fields.json import KT
from django.db.models.functions import Lower
from django.utils import timezone

from projects.hosts import default_code_host
from projects.roles import Role
from projects.signals import event_recorded
from projects.verify import LANDING_DEFAULTS, default_landing

# --- Append-only storage ----------------------------------------------------------


class AppendOnlyError(Exception):
    """Raised when code tries to change or delete a row that must never change."""


class AppendOnlyQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise AppendOnlyError(f"{self.model.__name__} rows are never updated")

    def delete(self):
        raise AppendOnlyError(f"{self.model.__name__} rows are never deleted")


class AppendOnlyModel(models.Model):
    """A row that is written once: saving an existing row or deleting one raises."""

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise AppendOnlyError(f"{type(self).__name__} {self.pk} is immutable")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnlyError(f"{type(self).__name__} {self.pk} is never deleted")


# --- Projects and members ------------------------------------------------------------


def default_gate_policy() -> dict:
    return {
        "required-evidence": {},
        "tests-pass": {},
        "diff-scope": {},
        "spec-current": {},
    }


class Project(models.Model):
    """A body of work with its own keys (``FM-12``), members, gate policy and attempt budget.

    ``slug`` is the prefix of every key in the project, so it never changes once set.
    The ``*_seq`` counters hand out key numbers; they only grow (see ``next_key``).
    """

    slug = models.CharField(
        max_length=12,
        unique=True,
        validators=[
            RegexValidator(
                r"^[A-Z][A-Z0-9]{0,11}$",
                "Use 1-12 capital letters or digits, starting with a letter.",
            )
        ],
        help_text="Key prefix, e.g. FM gives tasks FM-1, specs FM-S1, decisions FM-D1.",
    )
    name = models.CharField(max_length=200)
    repository_url = models.CharField(
        max_length=2000,
        blank=True,
        help_text="Where the runner fetches from: https://, ssh://, file:// or a path.",
    )
    default_branch = models.CharField(
        max_length=200, default="main", help_text="The branch changes are diffed against."
    )
    verify = models.JSONField(
        default=dict,
        blank=True,
        help_text="How the runner verifies a submission: setup, test, junit, coverage, limits.",
    )
    gate_policy = models.JSONField(
        default=default_gate_policy,
        blank=True,
        help_text='Gates to run on each submission, with parameters: {"coverage": {"threshold": 0.8}}.',
    )
    landing = models.JSONField(
        default=default_landing,
        blank=True,
        help_text="The merge queue: mode off|push, method squash|merge, batch_max, target_branch.",
    )
    code_host = models.JSONField(
        default=default_code_host,
        blank=True,
        help_text="Where its code lives (provider none|github, api_url, repository) and the "
        "names of the environment variables holding its credentials (projects.hosts).",
    )
    claim_avoid_overlap = models.BooleanField(
        null=True,
        blank=True,
        help_text="Claims prefer tasks whose allowed_paths overlap no task in progress, in "
        "review or queued to land. Empty: on when landing is on.",
    )
    budget_usd = models.DecimalField(
        max_digits=12,
        decimal_places=2,
        null=True,
        blank=True,
        help_text="What its attempts may cost per calendar month (UTC), by their agents' "
        "self-reported usage; past it a claim is refused. Empty: no limit.",
    )
    prices = models.JSONField(
        default=dict,
        blank=True,
        help_text="What its agents' models cost, for usage reported without a cost: model → "
        "US dollars per million input, output, cache_read and cache_write tokens, and the "
        "date set_on (projects.prices).",
    )
    max_attempts = models.PositiveSmallIntegerField(
        default=3, help_text="Default for new tasks: failed attempts allowed before a task fails."
    )
    task_seq = models.PositiveIntegerField(default=0, editable=False)
    spec_seq = models.PositiveIntegerField(default=0, editable=False)
    decision_seq = models.PositiveIntegerField(default=0, editable=False)
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="Membership", related_name="projects"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        db_table = "tasks_project"
        ordering = ["slug"]
        constraints = [
            # A host's deliveries for a repository act in one project: a second project
            # following it would read the first one's pull requests and issues.
            models.UniqueConstraint(
                KT("code_host__api_url"),
                Lower(KT("code_host__repository")),
                condition=models.Q(code_host__provider="github"),
                name="project_one_per_host_repository",
            ),
        ]

    def __str__(self) -> str:
        return self.slug

    @property
    def lands(self) -> bool:
        """Whether approved work goes through the merge queue (landing mode ``push``, or
        ``pull_request``: the lander's verified commit merged through the host, ADR 0041)."""
        return self.landing_settings["mode"] in ("push", "pull_request")

    @property
    def lands_through_host(self) -> bool:
        """Whether the lander lands through the task's pull request (``pull_request``) rather
        than by pushing to the target itself: one change per merge (ADR 0041)."""
        return self.landing_settings["mode"] == "pull_request"

    @property
    def avoids_overlap(self) -> bool:
        """Whether a claim prefers tasks that overlap no work in progress: the setting, or,
        unset, whether landing is on (fewer conflicts at the source)."""
        return self.lands if self.claim_avoid_overlap is None else self.claim_avoid_overlap

    @property
    def landing_settings(self) -> dict:
        """The landing block with the defaults of the fields added since it was saved: the
        one place a reader gets a setting of the merge queue from."""
        return {**LANDING_DEFAULTS, **(self.landing or {})}

    @property
    def landing_target(self) -> str:
        """The branch the merge queue lands on: its own setting, or the default branch."""
        return self.landing_settings["target_branch"] or self.default_branch

    def audit_scope(self) -> tuple[int, None]:
        return self.pk, None

    # What each kind of key counts with, and the letter after the slug: FM-12, FM-S3, FM-D7.
    KEYS = {"task": ("task_seq", ""), "spec": ("spec_seq", "S"), "decision": ("decision_seq", "D")}

    def next_key(self, kind: str) -> tuple[int, str]:
        """Allocate the next ``(number, key)`` of ``kind`` inside the caller's transaction."""
        [number] = self.next_numbers(kind, 1)
        return number, self.key_for(kind, number)

    def next_numbers(self, kind: str, count: int) -> range:
        """Allocate the next ``count`` numbers of ``kind`` inside the caller's transaction.

        The UPDATE locks the project row until commit, so two writers never get the same
        number; a rolled-back transaction gives its numbers back.
        """
        counter, _ = self.KEYS[kind]
        Project.objects.filter(pk=self.pk).update(**{counter: models.F(counter) + count})
        last = Project.objects.values_list(counter, flat=True).get(pk=self.pk)
        return range(last - count + 1, last + 1)

    def key_for(self, kind: str, number: int) -> str:
        """The key of ``kind`` numbered ``number``: FM-12, FM-S3, FM-D7."""
        return f"{self.slug}-{self.KEYS[kind][1]}{number}"


class Imported(models.Model):
    """Where a row came from when a team's files were imported (``interop``).

    ``origin`` names the format, the upload's origin name and the item's own id there
    (``beads:issues:bd-a1b2``, ``madr:service-a:docs/adr/0005``,
    ``speckit:shop:001-photo-albums/T003``; ``interop.origins``), unique in the project, so
    the same files imported again find their rows instead of adding new ones, and another
    repository's files with the same ids never do. ``metadata`` keeps what
    the format holds and Factory Memory has no field for, so an export gives it back.
    """

    origin = models.CharField(max_length=300, blank=True, default="", editable=False)
    metadata = models.JSONField(default=dict, blank=True, editable=False)

    class Meta:
        abstract = True


class NumberedInProject(Imported):
    """A row numbered per project, with origin: a spec, a decision record or a task.

    Guarantees (database constraints): ``number`` is unique in the project and ``key``
    (``FM-12``, ``FM-S3``, ``FM-D7``: the slug, the kind's letter, the number) everywhere; an
    ``origin``, when not empty, is unique in the project. Numbers come from the project's
    counter of the model's kind (``Project.KEYS``, by the model's name), never reused.

    Each model declares its own ``project`` foreign key: its reverse name (``specs``,
    ``decisions``, ``tasks``) is part of its migrations' state, which a ``%(class)s``
    name declared here would change (Django keeps the name as written).
    """

    number = models.PositiveIntegerField(editable=False)
    key = models.CharField(max_length=32, unique=True, editable=False)

    class Meta:
        abstract = True
        ordering = ["project", "number"]
        # "%(class)s" keeps each model's names as they were: spec_number_unique_per_project.
        constraints = [
            models.UniqueConstraint(
                fields=["project", "number"], name="%(class)s_number_unique_per_project"
            ),
            models.UniqueConstraint(
                fields=["project", "origin"],
                condition=~models.Q(origin=""),
                name="%(class)s_origin_unique_per_project",
            ),
        ]

    def __str__(self) -> str:
        return self.key

    @classmethod
    def next_key_in(cls, project: Project) -> tuple[int, str]:
        """Allocate the next ``(number, key)`` of this kind in ``project``, inside the
        caller's transaction (``Project.next_key``)."""
        return project.next_key(cls._meta.model_name)


class Membership(models.Model):
    """A user's role in a project. A user may hold several roles in one project.

    ``from_provider`` marks a role single sign-on's role map granted: the provider's to
    take back at a sign-in whose claim no longer grants it, even once the map stops naming
    it (``projects.services.memberships_sync``, ADR 0022).
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices)
    from_provider = models.BooleanField(
        default=False,
        editable=False,
        help_text="Granted by the identity provider's role claim (single sign-on), which "
        "takes it back when the claim no longer grants it.",
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        db_table = "tasks_membership"
        constraints = [
            models.UniqueConstraint(
                fields=["user", "project", "role"], name="membership_unique_role"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} is {self.role} in {self.project}"

    def audit_scope(self) -> tuple[int, None]:
        return self.project_id, None


class Identity(models.Model):
    """The account at an identity provider (OpenID Connect) that signs in as ``user``.

    Single sign-on finds its user by this pair only, never by a username or an email the
    provider asserts, so nobody at the provider can sign in as an account made here with a
    password. Each pair belongs to one user; a user made by a sign-in has no password.
    Rows are written by ``projects.services`` only (``identity_sign_in``, ``identity_link``,
    ``identity_unlink``): only a superuser links one to a staff or superuser account, and
    every link, change and deletion is an Event saying who made it.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="identities"
    )
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        verbose_name_plural = "identities"
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="identity_unique_subject"),
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"

    def audit_scope(self) -> tuple[None, None]:
        # An identity belongs to the site, not to a project: its Events have no project,
        # so no member of any project sees them; the admin does (ADR 0022).
        return None, None


# --- Audit trail ------------------------------------------------------------------------


class Event(AppendOnlyModel):
    """One transition of one state machine: who, when, from, to, why. Never changed or deleted.

    ``task`` is set for everything that happens to a task or its attempts and gate
    runs, so a task's timeline is one indexed query. ``project`` is empty only for what
    belongs to the site rather than a project (a single sign-on identity linked to an
    account): no API caller or page of a project sees those, the admin does (ADR 0022).
    """

    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.PROTECT, related_name="events"
    )
    task = models.ForeignKey(
        "tasks.Task", null=True, blank=True, on_delete=models.PROTECT, related_name="events"
    )
    content_type = models.ForeignKey(ContentType, on_delete=models.PROTECT)
    object_id = models.PositiveBigIntegerField()
    subject = GenericForeignKey("content_type", "object_id")
    object_key = models.CharField(max_length=64, help_text="The object's key when it happened.")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="Empty when the system acted (a gate worker or the reconciler).",
    )
    transition = models.CharField(max_length=50)
    from_state = models.CharField(max_length=20, blank=True)
    to_state = models.CharField(max_length=20, blank=True)
    reason = models.TextField(blank=True)
    extra = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False, db_index=True)

    class Meta:
        db_table = "tasks_event"
        ordering = ["created_at", "id"]
        indexes = [
            models.Index(fields=["content_type", "object_id"], name="event_subject"),
            models.Index(fields=["task", "created_at"], name="event_task_timeline"),
            # The plan's history: a project's tasks reaching done, newest first.
            models.Index(fields=["project", "to_state", "created_at"], name="event_project_state"),
        ]

    def __str__(self) -> str:
        return f"{self.object_key} {self.transition}: {self.from_state or '∅'} → {self.to_state}"

    @classmethod
    def record(
        cls, subject, *, actor, transition, from_state, to_state, reason="", extra=None
    ) -> "Event":
        """Write the event for ``subject`` in the caller's transaction."""
        project_id, task_id = subject.audit_scope()
        event = cls.objects.create(
            project_id=project_id,
            task_id=task_id,
            content_type=ContentType.objects.get_for_model(subject),
            object_id=subject.pk,
            object_key=str(subject)[:64],
            actor=actor,
            transition=transition,
            from_state=from_state or "",
            to_state=to_state,
            reason=reason or "",
            extra=extra or {},
        )
        event_recorded.send(sender=cls, event=event, subject=subject)
        return event

    @property
    def actor_label(self) -> str:
        return self.actor.get_username() if self.actor_id else "system"
