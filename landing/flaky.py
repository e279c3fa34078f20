"""What a project keeps of its flaky tests: each recorded (``FlakyTest``: trees, counts,
first and last seen), quarantined by a manager or by the project's rule after
``quarantine_after`` flakes, released after ``release_after`` passes in a row (an Event
each). A quarantined test neither blocks nor blames; its failures are still read and
shown. How a tree's runs tell a flaky test from a failing one is ``runner.judging``'s
(docs/landing.md, "Flaky tests"; ADR 0032).
"""

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from landing.models import FlakyTest
from projects import metrics
from projects.models import Event, Project
from runner.judging import Run

QUARANTINED, FREE = "quarantined", "free"  # the states a quarantine's Event moves between


def quarantined(project: Project) -> set[str]:
    """The project's quarantined tests, read once per batch."""
    return set(
        FlakyTest.objects.filter(project=project, quarantined=True).values_list("test", flat=True)
    )


def record(project: Project, tests: list[str], *, tree: str) -> None:
    """Each of ``tests`` flaked at ``tree``: counted, and quarantined by the project's rule
    once it flaked ``quarantine_after`` times (an Event, by nobody)."""
    after = project.landing_settings["quarantine_after"]
    now = timezone.now()
    for test in tests:
        with transaction.atomic():
            row, _ = FlakyTest.objects.select_for_update(no_key=True, of=("self",)).get_or_create(
                project=project, test=test[:500], defaults={"first_seen": now}
            )
            row.flakes += 1
            row.trees = [*[t for t in row.trees if t != tree], tree][-FlakyTest.TREES_KEPT :]
            row.first_seen, row.last_seen = row.first_seen or now, now
            row.save()
            metrics.landing_flaked(project=project.slug)
            if after and not row.quarantined and row.flakes >= after:
                set_quarantine(
                    row,
                    actor=None,
                    on=True,
                    reason=f"flaked {row.flakes} times (the project quarantines after {after})",
                )


def record_flaked(sender, *, project: Project, tests: list[str], tree: str, **kwargs) -> None:
    """The runner's gate saw ``tests`` of the project flake at a submitted commit
    (``runner.signals.flaked``): the same record as the lander's."""
    record(project, tests, tree=tree)


def count_runs(project: Project, run: Run) -> None:
    """A run of the quarantined tests: a pass counts toward release (``release_after`` in a
    row leaves quarantine, an Event by nobody); a failure starts the count again."""
    if run.quarantined_failing:
        FlakyTest.objects.filter(project=project, test__in=run.quarantined_failing).update(passes=0)
    if not run.quarantined_passing:
        return
    after = project.landing_settings["release_after"]
    FlakyTest.objects.filter(
        project=project, quarantined=True, test__in=run.quarantined_passing
    ).update(passes=F("passes") + 1)
    with transaction.atomic():
        for row in FlakyTest.objects.select_for_update(no_key=True, of=("self",)).filter(
            project=project, quarantined=True, passes__gte=after
        ):
            set_quarantine(row, actor=None, on=False, reason=f"passed {row.passes} runs in a row")


def set_quarantine(row: FlakyTest, *, actor, on: bool, reason: str) -> FlakyTest:
    """Put ``row`` (locked by the caller) in or out of quarantine, with an Event."""
    was = QUARANTINED if row.quarantined else FREE
    row.quarantined, row.reason, row.passes = on, reason, 0
    row.quarantined_at = timezone.now() if on else None
    row.quarantined_by = actor if on else None
    row.save(update_fields=["quarantined", "reason", "passes", "quarantined_at", "quarantined_by"])
    Event.record(
        row,
        actor=actor,
        transition="quarantine" if on else "release",
        from_state=was,
        to_state=QUARANTINED if on else FREE,
        reason=reason,
        extra={"test": row.test},
    )
    return row
