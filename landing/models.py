"""A landing batch: what one lander tried to put on a project's target branch at once;
and a project's lander: what it must remember between wake-ups (its back-off)."""

from django.conf import settings
from django.db import models
from django.utils import timezone
from django_fsm import RETURN_VALUE, FSMField, transition

from projects.models import Project
from projects.roles import MANAGER, SYSTEM


class BatchState(models.TextChoices):
    BUILDING = "building"
    VERIFYING = "verifying"
    PUSHING = "pushing"  # the commit point: ``result`` may be on the target from here on
    LANDED = "landed"  # some or all of its changes are on the target
    RETURNED = "returned"  # none landed: each came back (a conflict, failing tests)
    ERROR = "error"  # the machine's trouble: its changes stay queued
    ABANDONED = "abandoned"  # its lander died before pushing: its changes stay queued


ACTIVE_BATCH_STATES = [BatchState.BUILDING, BatchState.VERIFYING, BatchState.PUSHING]
BEFORE_PUSH = [BatchState.BUILDING, BatchState.VERIFYING]
REVERT = "revert"  # the method of a batch that lands a manager's revert


class Batch(models.Model):
    """One lander's run over up to ``batch_max`` queued changes, in approval order.

    Guarantees: ``plan`` (which commit carries which attempt) and ``result`` are written
    before the push, so a lander killed at any point leaves a batch another lander can
    settle from git alone: landed if ``result`` is on the target, else abandoned with its
    changes still queued. ``changes`` records each change's outcome; the counts say what
    the batch cost (verify runs, bisect steps, pushes tried, runs repeated to tell a flaky
    test from a failing one; ``flaky`` names the tests that flaked).
    """

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="+")
    # Moved only by its transitions below, through ``landing.states.move`` (``fire``: an
    # Event each); not protected, so a batch may be read again from the database.
    state = FSMField(max_length=16, choices=BatchState.choices, default=BatchState.BUILDING)
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
    reruns = models.PositiveSmallIntegerField(
        default=0, help_text="Runs repeated at the same tree because the first failed."
    )
    speculative_unused = models.PositiveSmallIntegerField(
        default=0, help_text="Runs started ahead of the bisection that it never needed."
    )
    flaked = models.PositiveSmallIntegerField(
        default=0, help_text="Trees it judged at which a test failed and then passed."
    )
    flaky = models.JSONField(
        default=list, blank=True, help_text="Tests that failed and then passed at one tree."
    )
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

    def audit_scope(self) -> tuple[int, None]:
        return self.project_id, None

    @property
    def fsm_project_id(self) -> int:
        return self.project_id

    # --- Its transitions: what the lander does, in the order it does it ---------------------

    @property
    def through_host(self) -> bool:
        """Whether the batch lands through a pull request the host merges (its plan says
        so), not by the lander's own push."""
        return any(item.get("pull") for item in self.plan)

    @transition(field=state, source=BatchState.BUILDING, target=BatchState.VERIFYING,
                permission=SYSTEM)  # fmt: skip
    def verify(self, *, base: str):
        """The chain is built on ``base`` (or the target alone is checked): verify it."""
        self.base = base

    @transition(field=state, source=[BatchState.VERIFYING, BatchState.PUSHING],
                target=BatchState.BUILDING, permission=SYSTEM)  # fmt: skip
    def rebuild(self):
        """Build again: the target moved under the push, or a change went back."""
        self.result, self.plan = "", []

    @transition(field=state, source=BatchState.VERIFYING, target=BatchState.PUSHING,
                permission=SYSTEM)  # fmt: skip
    def push(self, *, result: str, tree: str, plan: list):
        """The commit point: ``plan`` and ``result`` are written before the push is sent."""
        self.result, self.tree, self.plan = result, tree, plan
        self.pushes += 1

    @transition(field=state, source=BatchState.PUSHING, target=BatchState.LANDED,
                permission=SYSTEM)  # fmt: skip
    def reach(self):
        """The push reached the target (its changes' tasks each have their own ``land``)."""

    @transition(field=state, source=BatchState.PUSHING, target=BatchState.RETURNED,
                permission=SYSTEM)  # fmt: skip
    def back(self, *, why: str):
        """Landing through a pull request, the host would not take its change for a reason
        of the change's own (its branch moved, a required check failed or stayed pending):
        it went back; nothing reached the target (ADR 0041)."""
        self.reason = why

    @transition(field=state, source=[*ACTIVE_BATCH_STATES, BatchState.ABANDONED],
                target=BatchState.ERROR, permission=SYSTEM)  # fmt: skip
    def err(self, *, why: str):
        """Nothing can be decided about its changes: they stay queued (from ``pushing``
        only when the push was refused with the target still at the batch's base)."""
        self.reason = why

    @transition(field=state, source=BEFORE_PUSH,
                target=RETURN_VALUE(BatchState.RETURNED, BatchState.ABANDONED),
                permission=SYSTEM)  # fmt: skip
    def end(self, *, returned: bool):
        """It lands nothing: some changes went back (returned), or none did (abandoned)."""
        return BatchState.RETURNED if returned else BatchState.ABANDONED

    @transition(field=state, source=BEFORE_PUSH, target=BatchState.ABANDONED,
                permission=SYSTEM)  # fmt: skip
    def abandon(self, *, why: str):
        """Its lander died before pushing: its changes stay queued."""
        self.reason = why

    @transition(field=state, source=BatchState.PUSHING,
                target=RETURN_VALUE(BatchState.LANDED, BatchState.ABANDONED),
                permission=SYSTEM)  # fmt: skip
    def settle(self, *, pushed: bool, why: str):
        """Its lander died while pushing: landed if its commit is on the target (only git
        can tell), else abandoned."""
        self.reason = why
        return BatchState.LANDED if pushed else BatchState.ABANDONED


class LanderState(models.TextChoices):
    READY = "ready"  # it works the queue whenever it is woken
    BACKING_OFF = "backing_off"  # a batch erred: it waits for the target or the queue to change


class Lander(models.Model):
    """What a project's lander remembers between wake-ups (ADR 0020): the batch that erred,
    by the target's tip it was built on and the change first in the queue then.

    Guarantees: while ``backing_off`` after a batch that verified (``verified``), the lander
    verifies nothing again until the target's tip or the head of the queue changes, or a
    manager asks (``retry``); it looks at the tip at ``wake_at``, each look twice as late as
    the one before (up to ``FACTORY_LANDING_BACKOFF_MAX_SECONDS``). After the machine's
    trouble (nothing verified: the repository unreachable, no sandbox) it tries again at
    ``wake_at`` on the same schedule. ``since`` is when it began backing off. Each change of
    state is an Event: ``back_off`` and ``resume`` by the system, ``retry`` by a manager.

    While ``paused`` (a manager's ``pause``, until their ``unpause`` or ``paused_until``),
    it starts no batch; approvals still queue. Each is an Event too.
    """

    project = models.OneToOneField(Project, on_delete=models.CASCADE, related_name="+")
    state = FSMField(default=LanderState.READY, choices=LanderState.choices, protected=True)
    tip = models.CharField(
        max_length=64,
        blank=True,
        help_text="The target's tip the erring batch was built on (empty: it was not read).",
    )
    head = models.ForeignKey(
        "tasks.Attempt",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The change first in the queue then.",
    )
    verified = models.BooleanField(
        default=False, help_text="The erring batch verified at (tip, head): not again."
    )
    batch = models.ForeignKey(
        Batch, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reason = models.TextField(blank=True)
    since = models.DateTimeField(null=True, blank=True, help_text="When it began backing off.")
    looks = models.PositiveIntegerField(
        default=0, help_text="Looks since that found the same tip and head."
    )
    wake_at = models.DateTimeField(null=True, blank=True, help_text="When it looks again.")
    # A manager's pause (landing.services.landing_pause), apart from the back-off: a
    # lander may be paused while it backs off, and resuming leaves what it remembers.
    paused_at = models.DateTimeField(
        null=True, blank=True, help_text="Since when landing is paused (empty: it is not)."
    )
    paused_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The manager who paused it.",
    )
    pause_reason = models.TextField(blank=True)
    paused_until = models.DateTimeField(
        null=True, blank=True, help_text="When the pause ends by itself (empty: at a resume)."
    )

    def __str__(self) -> str:
        return f"lander of {self.project.slug}"

    @property
    def paused(self) -> bool:
        return self.paused_at is not None

    def audit_scope(self) -> tuple[int, None]:
        return self.project_id, None

    @property
    def fsm_project_id(self) -> int:
        return self.project_id

    @transition(
        field=state,
        source=[LanderState.READY, LanderState.BACKING_OFF],
        target=LanderState.BACKING_OFF,
        permission=SYSTEM,
    )
    def back_off(self, *, tip, head, verified, batch, why, now, wake_at):
        if self.state == LanderState.READY:
            self.since = now
        self.tip, self.head, self.verified, self.batch = tip, head, verified, batch
        self.reason, self.looks, self.wake_at = why, 0, wake_at

    @transition(
        field=state, source=LanderState.BACKING_OFF, target=LanderState.READY, permission=SYSTEM
    )
    def resume(self):
        self._forget()

    @transition(
        field=state, source=LanderState.BACKING_OFF, target=LanderState.READY, permission=MANAGER
    )
    def retry(self):
        self._forget()

    def _forget(self):
        self.tip, self.head, self.verified, self.batch = "", None, False, None
        self.reason, self.since, self.looks, self.wake_at = "", None, 0, None


class FlakyTest(models.Model):
    """A test of a project that failed and then passed at one tree (``landing.flaky``), or
    that a manager quarantined before it ever did.

    Guarantees: one row per (project, test id); ``flakes`` counts the trees at which it
    failed and then passed, ``trees`` holds the last ``TREES_KEPT`` of them. While
    ``quarantined`` its failures neither block a landing nor blame a change (they are still
    shown); ``passes`` counts the runs it passed since it was last quarantined or failed,
    and at the project's ``release_after`` it leaves quarantine. Each quarantine and release
    is an Event (``quarantine``, ``release``).
    """

    TREES_KEPT = 10

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    test = models.CharField(max_length=500, help_text="The test's id, as its JUnit names it.")
    flakes = models.PositiveIntegerField(default=0)
    trees = models.JSONField(default=list, blank=True, help_text="The last trees it flaked at.")
    first_seen = models.DateTimeField(null=True, blank=True)
    last_seen = models.DateTimeField(null=True, blank=True)
    quarantined = models.BooleanField(default=False)
    quarantined_at = models.DateTimeField(null=True, blank=True)
    quarantined_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The manager who quarantined it (empty: the project's rule did).",
    )
    reason = models.TextField(blank=True, help_text="Why it is (or was last) quarantined.")
    passes = models.PositiveIntegerField(
        default=0, help_text="Runs it passed in a row while quarantined."
    )

    class Meta:
        ordering = ["-quarantined", "-last_seen", "test"]
        constraints = [
            models.UniqueConstraint(fields=["project", "test"], name="landing_flaky_one_per_test")
        ]

    def __str__(self) -> str:
        return self.test

    def audit_scope(self) -> tuple[int, None]:
        return self.project_id, None
