"""Flaky tests: a failure counts only once it is seen twice at one tree, and blames nobody
until it is seen a third time at the tree that would blame (docs/landing.md, "Flaky
tests"; ADR 0032).

The lander judges a tree by ``judge``: one run; if it fails, a second run at the same tree.
A test that fails at one run and passes at the other is *flaky* at that tree: recorded per
project (``FlakyTest``) and, unless a queued change adds or edits it (``own_flaky``, which
holds that change), ignored. A tree fails only by a test that failed at both runs, or by
a failure beyond its tests at both (a crash, a time limit, an unreadable report); a
culprit's prefix is run once more (``confirm``) before anyone is blamed, and a returned
change's context names only tests that failed at every run. A quarantined test (a
manager's, or the project's rule after ``quarantine_after`` flakes) neither blocks nor
blames; its failures are still read and shown, and ``release_after`` passes in a row end
it.
"""

from dataclasses import dataclass, field

from django.core.exceptions import ValidationError
from django.core.files.base import ContentFile
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from evidence.gates import test_ids
from evidence.parsers import junit_cases
from landing.models import FlakyTest
from projects import metrics
from projects.models import Event, Project
from runner.verify import Result

# A report naming more failing tests than this cannot tell flaky from failing: its failure
# counts as one beyond its tests (bounded work, ADR 0028).
TRACKED = 1000
QUARANTINED, FREE = "quarantined", "free"  # the states a quarantine's Event moves between


@dataclass
class Run:
    """One run's reading: its failing tests apart from the quarantined ones."""

    result: Result
    failing: list[str] = field(default_factory=list)
    quarantined_failing: set[str] = field(default_factory=set)
    quarantined_passing: set[str] = field(default_factory=set)
    # Its only problem is the test command's failure, and its report names every failure.
    explained: bool = False

    @property
    def ok(self) -> bool:
        return self.result.passed or (self.explained and not self.failing)


@dataclass
class Verdict:
    """What one tree's runs decide: it passed, or it failed by ``failing`` (tests that failed
    at both runs; empty for a failure beyond the tests). ``flaky``: tests that failed at one
    run and passed at the other."""

    passed: bool
    result: Result
    failing: list[str] = field(default_factory=list)
    flaky: list[str] = field(default_factory=list)
    runs: int = 1
    readings: list[Run] = field(default_factory=list, repr=False)


def read(result: Result, quarantine: set[str]) -> Run:
    """``result`` read against the quarantine. A report that cannot be read is a failure
    beyond the tests, saying why: the report decides nothing it cannot say."""
    run = Run(result=result)
    if result.junit is None:
        return run
    try:
        for case in junit_cases(ContentFile(result.junit)):
            test = test_ids(case)[0]
            if case.outcome in ("passed", "skipped"):
                if test in quarantine and case.outcome == "passed":
                    run.quarantined_passing.add(test)
            elif test in quarantine:
                run.quarantined_failing.add(test)
            elif len(run.failing) < TRACKED:
                run.failing.append(test)
            else:
                return run  # too many to tell apart: not explained by its tests
    except ValidationError as exc:
        result.problems.append(f"its JUnit report cannot be read: {'; '.join(exc.messages)}")
        return Run(result=result)
    run.quarantined_passing -= run.quarantined_failing
    run.explained = _only_the_tests_failed(result) and bool(run.failing or run.quarantined_failing)
    return run


def _only_the_tests_failed(result: Result) -> bool:
    """The run's one problem is its test step ending with a failing exit code (not stopped
    by a limit, nor a setup step): what its report's failures explain."""
    if len(result.problems) != 1 or not result.steps:
        return False
    last = result.steps[-1]
    return last.get("name") == "test" and bool(last.get("exit_code")) and not last.get("stopped")


def judge(run_once, quarantine: set[str], seen) -> Verdict:
    """The verdict on one tree: ``run_once()`` verifies it (a ``Result``), at most twice;
    ``seen(run)`` is told of each run's reading (the quarantine counts its passes)."""
    first = read(run_once(), quarantine)
    seen(first)
    if first.ok:
        return Verdict(passed=True, result=first.result, readings=[first])
    second = read(run_once(), quarantine)
    seen(second)
    return decide([first, second])


def confirm(verdict: Verdict, run_once, quarantine: set[str], seen) -> Verdict:
    """``verdict``, a failing one, with one more run of its tree: the run that must also
    fail before the tree's failure blames a change (``landing.verifying.verified_prefix``).
    A test that fails one run in twenty fails two in a row once in 400 trees, and three
    once in 8,000."""
    run = read(run_once(), quarantine)
    seen(run)
    return decide([*verdict.readings, run])


def decide(readings: list[Run]) -> Verdict:
    """What the runs of one tree decide together: it passed if a run passed, or if every
    run failed only by its tests and no test failed at all of them; it failed by the tests
    that failed at every run (``failing``), or by a failure beyond its tests. ``flaky``:
    the tests that failed at a run and passed at another."""
    last = readings[-1]
    runs = len(readings)
    if last.ok:
        flaky = sorted({test for run in readings[:-1] if run.explained for test in run.failing})
        return Verdict(passed=True, result=last.result, flaky=flaky, runs=runs, readings=readings)
    if all(run.explained for run in readings):
        every = set.intersection(*(set(run.failing) for run in readings))
        failing = [test for test in last.failing if test in every]
        # Every failing test also passed at this tree: flaky, each of them.
        flaky = sorted({test for run in readings for test in run.failing} - every)
        return Verdict(
            passed=not failing,
            result=last.result,
            failing=failing,
            flaky=flaky,
            runs=runs,
            readings=readings,
        )
    return Verdict(
        passed=False, result=last.result, failing=last.failing, runs=runs, readings=readings
    )


def file_of(test: str) -> str:
    """The file a test id names (``tests/test_x.py::T::name`` → ``tests/test_x.py``)."""
    return test.split("::", 1)[0]


def own_flaky(flaky: list[str], paths: set[str]) -> list[str]:
    """The flaky tests among ``flaky`` whose file a change adds or edits (``paths``)."""
    return [test for test in flaky if file_of(test) in paths]


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
