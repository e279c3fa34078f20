"""Tasks, their attempts and their labels.

State fields are ``FSMField(protected=True)``: nothing assigns them; the
``@transition`` methods below only set fields, and the services (``tasks.services``,
``tasks.attempts``, ``tasks.review``) are the only callers (through ``projects.fsm.fire``),
so every change of state is permission-checked, row-locked and written with its ``Event``.
"""

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django_fsm import RETURN_VALUE, ConcurrentTransitionMixin, FSMField, transition

from projects.errors import Conflict, PermissionDenied
from projects.fsm import Condition
from projects.models import NumberedInProject, Project
from projects.roles import HOLDER, MANAGER, REVIEWER_NOT_HOLDER, SYSTEM, Role, role_rule

AGENT = role_rule(Role.AGENT)


# --- Labels ---------------------------------------------------------------------------


class Label(models.Model):
    """A tag on tasks; agents may claim only tasks carrying given labels."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="labels")
    name = models.CharField(
        max_length=50,
        validators=[
            RegexValidator(
                r"^[a-z0-9][a-z0-9._:/-]*$", "Use lower-case letters, digits and . _ : / -"
            )
        ],
    )

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="label_unique_per_project"),
        ]

    def __str__(self) -> str:
        return self.name


# --- Tasks ----------------------------------------------------------------------------


class TaskState(models.TextChoices):
    DRAFT = "draft"
    READY = "ready"
    CLAIMED = "claimed"
    CHECKING = "checking"
    IN_REVIEW = "in_review"
    APPROVED = "approved"  # queued to land (landing on): done once its change is on the target
    DONE = "done"
    BLOCKED = "blocked"
    FAILED = "failed"
    CANCELLED = "cancelled"


def _dependencies_refusal(task):
    if getattr(task, "dependencies_checked", False):
        return None
    open_keys = list(task.depends_on.exclude(state=TaskState.DONE).values_list("key", flat=True))
    if open_keys:
        return ("dependencies_open", f"{task} waits for {', '.join(sorted(open_keys))} to be done")
    return None


def _attempts_left_refusal(task):
    if task.failed_attempts >= task.max_attempts:
        return (
            "attempts_exhausted",
            f"{task} has used all {task.max_attempts} attempts; a manager must reopen it",
        )
    return None


DEPENDENCIES_DONE = Condition(_dependencies_refusal, "dependencies_done")
ATTEMPTS_LEFT = Condition(_attempts_left_refusal, "attempts_left")


class Task(ConcurrentTransitionMixin, NumberedInProject):
    """A unit of work an agent can claim, with the boundary its change must stay inside.

    Guarantees: ``key`` is unique and never reused; the state changes only through the
    transitions below; ``current_attempt`` is the attempt the state is about while the
    task is claimed, checking, in review or done (the approved one), and empty otherwise.
    """

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="tasks")
    title = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    spec = models.ForeignKey(
        "decisions.Spec", null=True, blank=True, on_delete=models.PROTECT, related_name="tasks"
    )
    priority = models.SmallIntegerField(default=0, help_text="Higher is claimed first.")
    labels = models.ManyToManyField(Label, blank=True, related_name="tasks")
    depends_on = models.ManyToManyField(
        "self", symmetrical=False, blank=True, related_name="dependents"
    )
    allowed_paths = models.JSONField(
        default=list, blank=True, help_text='Globs a change must stay inside, e.g. ["tasks/**"].'
    )
    state = FSMField(default=TaskState.DRAFT, choices=TaskState.choices, protected=True)
    max_attempts = models.PositiveSmallIntegerField(default=3)
    attempt_count = models.PositiveSmallIntegerField(default=0, editable=False)
    failed_attempts = models.PositiveSmallIntegerField(
        default=0,
        editable=False,
        help_text="Attempts that failed gates or review since the last reopen.",
    )
    landed_commit = models.CharField(
        max_length=64,
        blank=True,
        editable=False,
        help_text="The commit on the landing target that carries this task's change.",
    )
    budget_usd = models.DecimalField(
        max_digits=10,
        decimal_places=2,
        null=True,
        blank=True,
        help_text="What one attempt at it may cost (its agents' self-reported usage); empty: no limit.",
    )
    current_attempt = models.ForeignKey(
        "Attempt",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        editable=False,
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta(NumberedInProject.Meta):
        indexes = [
            # The claim query's filter and order: the first unlocked row is found without a sort.
            models.Index(
                fields=["project", "state", "-priority", "created_at", "id"],
                name="task_claim_order",
            ),
        ]

    @property
    def fsm_project_id(self) -> int:
        return self.project_id

    @property
    def holder_id(self) -> int | None:
        """The agent whose attempt the task's state is about, if any."""
        return self.current_attempt.agent_id if self.current_attempt_id else None

    def audit_scope(self) -> tuple[int, int | None]:
        return self.project_id, self.pk

    def _after_failure(self):
        self.failed_attempts += 1
        self.current_attempt = None
        return TaskState.FAILED if self.failed_attempts >= self.max_attempts else TaskState.READY

    @transition(field=state, source=TaskState.DRAFT, target=TaskState.READY, permission=MANAGER)
    def publish(self):
        pass

    @transition(
        field=state,
        source=TaskState.READY,
        target=TaskState.CLAIMED,
        permission=AGENT,
        conditions=[DEPENDENCIES_DONE, ATTEMPTS_LEFT],
    )
    def claim(self, attempt):
        self.attempt_count = attempt.number
        self.current_attempt = attempt

    @transition(field=state, source=TaskState.CLAIMED, target=TaskState.READY, permission=HOLDER)
    def release(self):
        self.current_attempt = None

    @transition(field=state, source=TaskState.CLAIMED, target=TaskState.READY, permission=SYSTEM)
    def expire(self):
        self.current_attempt = None

    @transition(
        field=state,
        source=TaskState.CLAIMED,
        target=RETURN_VALUE(TaskState.READY, TaskState.FAILED),
        permission=SYSTEM,
    )
    def exhaust_budget(self):
        # Unlike a lost lease it counts as a failed attempt: each new attempt has the
        # whole budget again, so only the attempt limit bounds what the task may cost.
        return self._after_failure()

    @transition(field=state, source=TaskState.CLAIMED, target=TaskState.BLOCKED, permission=HOLDER)
    def block(self):
        self.current_attempt = None

    @transition(field=state, source=TaskState.CLAIMED, target=TaskState.CHECKING, permission=HOLDER)
    def submit(self):
        pass

    @transition(
        field=state, source=TaskState.CHECKING, target=TaskState.IN_REVIEW, permission=SYSTEM
    )
    def gates_passed(self):
        pass

    @transition(
        field=state,
        source=TaskState.CHECKING,
        target=RETURN_VALUE(TaskState.READY, TaskState.FAILED),
        permission=SYSTEM,
    )
    def gates_failed(self):
        return self._after_failure()

    @transition(
        field=state,
        source=TaskState.IN_REVIEW,
        target=RETURN_VALUE(TaskState.DONE, TaskState.APPROVED),
        permission=REVIEWER_NOT_HOLDER,
    )
    def approve(self):
        # With the merge queue on, approved work is done only once it is on the target.
        return TaskState.APPROVED if self.project.lands else TaskState.DONE

    @transition(
        field=state, source=TaskState.CHECKING, target=TaskState.APPROVED, permission=SYSTEM
    )
    def requeue(self):
        pass

    @transition(field=state, source=TaskState.APPROVED, target=TaskState.DONE, permission=SYSTEM)
    def land(self, commit: str):
        self.landed_commit = commit

    @transition(field=state, source=TaskState.DONE, target=TaskState.READY, permission=SYSTEM)
    def revert(self):
        # A manager's revert of its landed change reached the target: the work is open again.
        self.landed_commit = ""
        self.current_attempt = None

    @transition(field=state, source=TaskState.APPROVED, target=TaskState.READY, permission=SYSTEM)
    def landing_returned(self):
        # Not a failed attempt: the work was approved; the target moved under it.
        self.current_attempt = None

    @transition(
        field=state,
        source=TaskState.APPROVED,
        target=RETURN_VALUE(TaskState.IN_REVIEW, TaskState.READY),
        permission=MANAGER,
    )
    def dequeue(self, to: str):
        if to == TaskState.READY:
            self.current_attempt = None
        return to

    @transition(
        field=state,
        source=TaskState.IN_REVIEW,
        target=RETURN_VALUE(TaskState.READY, TaskState.FAILED),
        permission=REVIEWER_NOT_HOLDER,
    )
    def reject(self):
        return self._after_failure()

    @transition(
        field=state,
        source=[TaskState.CLAIMED, TaskState.CHECKING, TaskState.IN_REVIEW],
        target=RETURN_VALUE(TaskState.READY, TaskState.FAILED),
        permission=SYSTEM,
    )
    def withdraw(self, counts: bool = False):
        # A person on the code host closed the task's pull request: not a failed attempt,
        # so the budget is not spent; the reason is on the attempt for the next context.
        # Past the free withdrawals (``tasks.attempts.WITHDRAWALS_FREE``) it ``counts``.
        if counts:
            return self._after_failure()
        self.current_attempt = None
        return TaskState.READY

    @transition(
        field=state,
        source=[TaskState.READY, TaskState.CHECKING, TaskState.IN_REVIEW, TaskState.APPROVED],
        target=TaskState.CHECKING,
        permission=SYSTEM,
    )
    def pushed(self, attempt):
        # A person pushed to the task's pull request: their push is the task's attempt now
        # (``tasks.attempts.attempt_from_push``), checked like any submission.
        self.attempt_count = attempt.number
        self.current_attempt = attempt

    @transition(field=state, source=TaskState.BLOCKED, target=TaskState.READY, permission=MANAGER)
    def unblock(self):
        pass

    @transition(field=state, source=TaskState.FAILED, target=TaskState.READY, permission=MANAGER)
    def reopen(self):
        # A reopened task gets its whole attempt budget again.
        self.failed_attempts = 0

    @transition(
        field=state,
        source=[TaskState.DRAFT, TaskState.READY, TaskState.BLOCKED, TaskState.FAILED],
        target=TaskState.CANCELLED,
        permission=MANAGER,
    )
    def cancel(self):
        pass


# --- Attempts -------------------------------------------------------------------------


class AttemptState(models.TextChoices):
    RUNNING = "running"
    CHECKING = "checking"
    PASSED = "passed"
    APPROVED = "approved"
    REJECTED = "rejected"
    FAILED = "failed"
    RELEASED = "released"
    ABANDONED = "abandoned"
    BLOCKED = "blocked"


class UsageState(models.TextChoices):
    """Whether an attempt's reported usage counts toward budgets and the cost views."""

    COUNTED = "counted"
    VOIDED = "voided"  # a manager voided what it had reported (``Attempt.usage_voided``)


# An attempt in one of these states still holds its task; at most one per task.
LIVE_ATTEMPT_STATES = [AttemptState.RUNNING, AttemptState.CHECKING, AttemptState.PASSED]


def _lease_live_refusal(attempt):
    if attempt.lease_expires_at is None or attempt.lease_expires_at <= timezone.now():
        return (
            "lease_lost",
            f"the lease on attempt {attempt} expired at {attempt.lease_expires_at:%Y-%m-%d %H:%M:%S}"
            " UTC; claim the task again to continue",
        )
    return None


def _lease_expired_refusal(attempt):
    if _lease_live_refusal(attempt) is None:
        return ("lease_live", f"the lease on attempt {attempt} is still live")
    return None


LEASE_LIVE = Condition(_lease_live_refusal, "lease_live")
LEASE_EXPIRED = Condition(_lease_expired_refusal, "lease_expired")


class Attempt(ConcurrentTransitionMixin, models.Model):
    """One agent's run at a task, under a lease.

    Guarantees: numbers are 1, 2, ... per task; a task has at most one live attempt
    (running, checking or passed — a database constraint); the spec version current
    at claim time is pinned; only the agent holding a live lease changes a running
    attempt (``LEASE_LIVE`` and ``Attempt.fence``). ``usage`` holds what its agent reported
    that counts toward budgets; a manager's void (``usage_state``) moves it to
    ``usage_voided`` once, and nothing else ever lowers it.
    """

    task = models.ForeignKey(Task, on_delete=models.PROTECT, related_name="attempts")
    number = models.PositiveSmallIntegerField(editable=False)
    agent = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="attempts"
    )
    state = FSMField(default=AttemptState.RUNNING, choices=AttemptState.choices, protected=True)
    spec_version = models.ForeignKey(
        "decisions.SpecVersion",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="attempts",
        help_text="The spec version current when the task was claimed.",
    )
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    checkpoint = models.JSONField(null=True, blank=True)
    checkpoint_revision = models.PositiveIntegerField(default=0)
    checkpoint_at = models.DateTimeField(null=True, blank=True)
    context_sha256 = models.CharField(max_length=64, blank=True)
    context_manifest = models.JSONField(default=list, blank=True)
    context_fetched_at = models.DateTimeField(null=True, blank=True)
    summary = models.TextField(blank=True)
    change = models.JSONField(
        default=dict, blank=True, help_text="Where the change is: commit, branch, url."
    )
    idempotency_key = models.CharField(max_length=255, blank=True)
    submit_receipt = models.JSONField(
        null=True,
        blank=True,
        editable=False,
        help_text="The answer the submit gave; repeated on a retry.",
    )
    submitted_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.TextField(blank=True, help_text="Why the attempt ended, in words.")
    reviewed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    applied = models.JSONField(
        null=True,
        blank=True,
        editable=False,
        help_text="What was in force when the reviewer decided: the spec version, the"
        " decisions, the gate policy and verdicts, the commit (tasks.review.in_force).",
    )
    criteria_verdicts = models.JSONField(
        default=list,
        blank=True,
        editable=False,
        help_text="The reviewer's verdict on each criterion of the pinned version, or the"
        " gates' where the reviewer kept it: [{key, verdict, note, by, gate}] (tasks.review.judge).",
    )
    queued_at = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        db_index=True,
        help_text="When it joined the landing queue (its approval); the queue's order.",
    )
    fast_at = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text="When a manager put its queued change in the fast lane (empty: it is not);"
        " the fast lane lands first, in this order (landing.services.landing_fast).",
    )
    revert_at = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text="When a manager asked to revert its landed change (empty: no revert is"
        " queued); reverts land in this order among the queue (landing.services.revert_request).",
    )
    landing = models.JSONField(
        default=dict,
        blank=True,
        editable=False,
        help_text="Where its change is in landing: {state, commit, batch, landed, reason, seconds,"
        " fast: {by, reason, alone}, revert: {state, by, reason, at, commit, batch}}.",
    )
    usage = models.JSONField(
        default=dict,
        blank=True,
        editable=False,
        help_text="What the attempt used, as its agent reported it (self-reported): {model,"
        " input_tokens, output_tokens, cost_usd, wall_seconds}, summed over heartbeats and the submit.",
    )
    usage_state = FSMField(
        default=UsageState.COUNTED,
        choices=UsageState.choices,
        protected=True,
        help_text="voided: a manager voided the usage reported until then (usage_voided);"
        " what is reported after it counts again.",
    )
    usage_voided = models.JSONField(
        default=dict,
        blank=True,
        editable=False,
        help_text="The void: {by, at, reason, usage}, usage being the totals reported until"
        " then, kept as the agent said them and counted nowhere.",
    )
    started_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["task", "number"]
        constraints = [
            models.UniqueConstraint(
                fields=["task", "number"], name="attempt_number_unique_per_task"
            ),
            models.UniqueConstraint(
                fields=["task"],
                condition=Q(state__in=LIVE_ATTEMPT_STATES),
                name="attempt_one_live_per_task",
            ),
        ]
        indexes = [
            models.Index(fields=["state", "lease_expires_at"], name="attempt_lease_expiry"),
        ]

    def __str__(self) -> str:
        return f"{self.task.key}#{self.number}"

    @property
    def fsm_project_id(self) -> int:
        return self.task.project_id

    @property
    def holder_id(self) -> int:
        return self.agent_id

    def audit_scope(self) -> tuple[int, int | None]:
        return self.task.project_id, self.task_id

    @property
    def lease_is_live(self) -> bool:
        return self.state == AttemptState.RUNNING and _lease_live_refusal(self) is None

    @property
    def is_live(self) -> bool:
        """Running, checking or passed: still the task's attempt, not ended."""
        return self.state in LIVE_ATTEMPT_STATES

    def fence(self, actor) -> "Attempt":
        """This attempt, locked, if ``actor`` holds its live lease; call inside atomic().

        The fencing check every write on an attempt makes in the database, in the same
        transaction as the write, whichever app is writing (evidence, decisions,
        checkpoints): 403 for someone else's attempt, 409 ``lease_lost`` once the lease
        has run out or the attempt has ended.
        """
        attempt = (
            type(self)
            .objects.select_for_update(no_key=True, of=("self",))
            .select_related("task")
            .get(pk=self.pk)
        )
        refusal = HOLDER.refusal(attempt, actor)
        if refusal:
            raise PermissionDenied(refusal[1], code=refusal[0])
        if attempt.state != AttemptState.RUNNING:
            raise Conflict(
                f"attempt {attempt} is {attempt.state}; its lease is over", code="lease_lost"
            )
        refusal = LEASE_LIVE.refusal(attempt)
        if refusal:
            raise Conflict(refusal[1], code=refusal[0])
        return attempt

    def _end(self, end_reason: str):
        self.ended_at = timezone.now()
        self.end_reason = end_reason

    @transition(
        field=state,
        source=AttemptState.RUNNING,
        target=AttemptState.CHECKING,
        permission=HOLDER,
        conditions=[LEASE_LIVE],
    )
    def submit(self, summary: str, change: dict, idempotency_key: str):
        self.summary = summary
        self.change = change
        self.idempotency_key = idempotency_key
        self.submitted_at = timezone.now()
        self.submit_receipt = {
            "attempt": self.pk,
            "task": self.task.key,
            "state": AttemptState.CHECKING.value,
            "submitted_at": self.submitted_at.isoformat().replace("+00:00", "Z"),
            "summary": summary,
            "change": change,
        }

    @transition(
        field=state,
        source=AttemptState.RUNNING,
        target=AttemptState.RELEASED,
        permission=HOLDER,
        conditions=[LEASE_LIVE],
    )
    def release(self, end_reason: str):
        self._end(end_reason)

    @transition(
        field=state,
        source=AttemptState.RUNNING,
        target=AttemptState.BLOCKED,
        permission=HOLDER,
        conditions=[LEASE_LIVE],
    )
    def block(self, end_reason: str):
        self._end(end_reason)

    @transition(
        field=state,
        source=AttemptState.RUNNING,
        target=AttemptState.ABANDONED,
        permission=SYSTEM,
        conditions=[LEASE_EXPIRED],
    )
    def expire(self):
        self._end("lease expired without a heartbeat")

    @transition(
        field=state,
        source=AttemptState.RUNNING,
        target=AttemptState.ABANDONED,
        permission=SYSTEM,
    )
    def exhaust_budget(self, end_reason: str):
        self._end(end_reason)

    @transition(
        field=state,
        source=LIVE_ATTEMPT_STATES,
        target=RETURN_VALUE(AttemptState.RELEASED, AttemptState.FAILED),
        permission=SYSTEM,
    )
    def withdraw(self, end_reason: str, counts: bool = False):
        # Its pull request was closed on the code host: given back, not failed — unless
        # the task's free withdrawals are used up, when it ``counts`` as a failed attempt.
        self._end(end_reason)
        return AttemptState.FAILED if counts else AttemptState.RELEASED

    @transition(
        field=state,
        source=[AttemptState.CHECKING, AttemptState.PASSED],
        target=AttemptState.RELEASED,
        permission=SYSTEM,
    )
    def supersede(self, end_reason: str):
        # A person's push to the pull request took its place; not a failure of its agent.
        self._end(end_reason)

    @transition(
        field=state, source=AttemptState.CHECKING, target=AttemptState.PASSED, permission=SYSTEM
    )
    def gates_passed(self):
        pass

    @transition(
        field=state, source=AttemptState.CHECKING, target=AttemptState.FAILED, permission=SYSTEM
    )
    def gates_failed(self, end_reason: str):
        self._end(end_reason)

    @transition(
        field=state,
        source=AttemptState.PASSED,
        target=AttemptState.APPROVED,
        permission=REVIEWER_NOT_HOLDER,
    )
    def approve(
        self,
        reviewer,
        end_reason: str,
        applied: dict,
        criteria_verdicts: list,
        landing: dict | None = None,
    ):
        self.reviewed_by = reviewer
        self.applied = applied
        self.criteria_verdicts = criteria_verdicts
        self._end(end_reason or "approved")
        if landing:
            # Queued to land: the queue's order is the order of approval.
            self.queued_at = self.ended_at
            self.landing = landing
            self.fast_at = None

    @transition(
        field=state,
        source=AttemptState.CHECKING,
        target=AttemptState.APPROVED,
        permission=SYSTEM,
    )
    def requeue(self, earlier, end_reason: str, landing: dict):
        # The approved change byte for byte, rebased (tasks.landing.approval_to_carry): its
        # approval carries over, and the record says whose it was and why no second review.
        self.reviewed_by = earlier.reviewed_by
        self.applied = earlier.applied
        self.criteria_verdicts = earlier.criteria_verdicts
        self._end(end_reason)
        self.queued_at = self.ended_at
        self.landing = landing

    @transition(
        field=state,
        source=AttemptState.APPROVED,
        target=AttemptState.PASSED,
        permission=MANAGER,
    )
    def review_again(self, end_reason: str):
        # Taken out of the landing queue to be reviewed again: the approval is withdrawn.
        self.reviewed_by = None
        self.ended_at = None
        self.end_reason = ""
        self.queued_at = self.fast_at = None
        self.landing = {**self.landing, "state": "dequeued", "reason": end_reason}

    @transition(
        field=state,
        source=AttemptState.PASSED,
        target=AttemptState.REJECTED,
        permission=REVIEWER_NOT_HOLDER,
    )
    def reject(self, reviewer, end_reason: str, applied: dict, criteria_verdicts: list):
        self.reviewed_by = reviewer
        self.applied = applied
        self.criteria_verdicts = criteria_verdicts
        self._end(end_reason)

    @transition(
        field=usage_state, source=UsageState.COUNTED, target=UsageState.VOIDED, permission=MANAGER
    )
    def void_usage(self, voided: dict):
        # What was reported moves aside, kept as said; the totals the budgets and the cost
        # views read start again from nothing, so later reports of a running attempt count.
        self.usage_voided = {**voided, "usage": self.usage}
        self.usage = {}


# --- Line comments -------------------------------------------------------------------------


class LineComment(models.Model):
    """A reviewer's comment on lines of an attempt's diff: a file, a side (``new`` for the
    changed file's line numbers, ``old`` for the original's), a first and a last line.

    Written only while the attempt waits for review, by a reviewer who did not submit it
    (``tasks.comments.comment_add``), each with its Event. It is resolved when a later
    attempt of the task changes those lines, or by hand; the next attempt's context lists
    the open ones first.
    """

    attempt = models.ForeignKey(Attempt, on_delete=models.PROTECT, related_name="comments")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    path = models.CharField(max_length=1000)
    side = models.CharField(max_length=3, choices=[("new", "new"), ("old", "old")], default="new")
    line = models.PositiveIntegerField()
    end_line = models.PositiveIntegerField()
    body = models.TextField()
    quote = models.JSONField(
        default=list,
        editable=False,
        help_text="The lines commented on, as the diff showed them: [number, text, changed].",
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(
        Attempt,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="The later attempt whose change touched these lines (empty: by hand).",
    )
    resolved_reason = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["attempt", "path", "line", "pk"]
        indexes = [models.Index(fields=["attempt", "resolved_at"], name="comment_attempt")]

    def __str__(self) -> str:
        lines = f"{self.line}" if self.line == self.end_line else f"{self.line}-{self.end_line}"
        return f"{self.attempt} {self.path}:{lines}"

    def audit_scope(self) -> tuple[int, int]:
        return self.attempt.task.project_id, self.attempt.task_id

    @property
    def where(self) -> str:
        lines = f"{self.line}" if self.line == self.end_line else f"{self.line}-{self.end_line}"
        return f"{self.path}:{lines}" + (" (old)" if self.side == "old" else "")
