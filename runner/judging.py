"""A tree judged by its runs: a failing test counts only once it fails twice at one tree.

``judge`` runs a tree once and, if it fails, once more at the same tree. A test that fails
at one run and passes at the other is *flaky* at that tree: a tree fails only by a test
that failed at both runs, or by a failure beyond its tests at both (a crash, a time
limit, an unreadable report). ``confirm`` runs a failing tree a third time, before its
failure blames anyone. A test in a file the change itself adds or edits that flakes is
that change's own (``own_flaky``): nobody lands or passes a coin-toss test of their own.

Both judges of a tree use these rules: the runner's gate at submission
(``runner.gates``), so a flaky test of the base never fails an agent's attempt, and the
lander at every merged tree (``landing.verifying``), so it never ejects a change. What a
project keeps of its flaky tests (their record and quarantine) is ``landing.flaky``'s
(docs/landing.md, "Flaky tests"; ADR 0032).
"""

from dataclasses import dataclass, field

from django.core.exceptions import ValidationError
from django.core.files.base import ContentFile

from evidence.gates import test_ids
from evidence.parsers import junit_cases
from runner.verify import Result

# A report naming more failing tests than this cannot tell flaky from failing: its failure
# counts as one beyond its tests (bounded work, ADR 0028).
TRACKED = 1000


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
