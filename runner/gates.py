"""The runner as a gate: it measures a submission instead of reading what was uploaded.

``RunnerGate`` goes first (every other gate of the submission waits for it), runs on
the ``verify`` queue, and stores what it measured (JUnit, coverage, its own diff and
its log) as ``runner`` evidence, which is authoritative: tests-pass, coverage and
diff-scope then decide on it (``evidence.models.decisive``). Its own verdict passes
when the test command passed at the commit and wrote its reports. A commit it cannot
verify as it stands (no history shared with the default branch, a tree it cannot or may
not check out) fails it at once, required or not, naming what is wrong; an unknown
commit is retried (it may be pushed late) and then fails it too. Only the server's own
trouble after every try (the repository unreachable, no sandbox: ``RunnerUnavailable``)
lets an optional runner pass as "not verified", so the other gates decide on what was
uploaded; a required runner is then an ``error``, and so is any other crash.
"""

import time
from dataclasses import dataclass, field, replace

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.files.base import ContentFile

from evidence.gates import Attachment, Gate, Verdict, test_ids
from evidence.models import Kind, Provenance
from evidence.parsers import junit_cases, summarize
from evidence.selectors import tested_criteria
from runner import judging
from runner.signals import flaked
from runner.verify import (
    CommitNotFound,
    CommitRefused,
    Result,
    RunnerUnavailable,
    changed,
    runs,
    tree_of,
)

FAILED_NAMED = 5
RUNS = 3  # at most, of one submitted commit (``judge``)
MARGIN_SECONDS = 30  # kept free under the time limit when deciding to run again


class RunnerGate(Gate):
    name = "runner"
    description = (
        "Factory Memory checks the submitted commit out of the project's repository, runs "
        "its verify command in a sandbox and attaches what it measured as authoritative "
        "evidence. required: without a passing runner result, no review."
    )
    params = {"required": (bool, False)}
    job = "runner.jobs.verify_job"
    goes_first = True
    needs_commit = True
    measures_repository = True
    provenance = Provenance.RUNNER

    @property
    def time_limit(self) -> int:
        return settings.FACTORY_RUNNER_TIME_LIMIT

    def check(self, attempt, params, policy):
        project = attempt.task.project
        commit = (attempt.change or {}).get("commit")
        if not commit:
            return Verdict(False, "the submission names no commit to verify", {"verified": False})
        if not project.verify or not project.repository_url:
            raise RunnerUnavailable("the project has no repository or verify block to run")
        try:
            judged = judge(project, commit, limit=self.time_limit)
        except CommitNotFound:
            raise  # tried again: the push may not have arrived yet
        except CommitRefused as exc:
            return _refused(exc)
        return self.verdict(attempt, judged)

    def gave_up(self, error, params):
        if params.get("required"):
            return None
        if isinstance(error, CommitRefused):
            # The submission's fault, not the machine's: an optional runner must not be
            # skipped by naming a commit that was never pushed.
            return _refused(error)
        if not isinstance(error, RunnerUnavailable):
            return None  # not known to be the server's trouble: an error, never a pass
        return Verdict(
            True,
            f"not verified (the runner is optional): {error}"[:2000],
            {"verified": False, "error": str(error)[:2000]},
        )

    def verdict(self, attempt, judged: "Judged") -> Verdict:
        """The gate's verdict on what the runs at the commit decided (``judge``), with the
        last run's reports attached."""
        result = judged.result
        short = result.commit[:12]
        tests_criteria = tuple(tested_criteria(attempt))
        attachments, tests = [], {}
        for kind, content, name, media_type, criteria in (
            (Kind.JUNIT, result.junit, "runner-junit.xml", "application/xml", tests_criteria),
            (Kind.COVERAGE, result.coverage, "runner-coverage.xml", "application/xml", ()),
            (Kind.DIFF, result.diff, "runner.diff", "text/x-diff", ()),
            (Kind.LOG, result.log, "runner.log", "text/plain", ()),
        ):
            if content is None or (kind == Kind.DIFF and not content):
                continue
            try:
                summary = summarize(kind, ContentFile(content, name=name))
            except ValidationError as exc:
                result.problems.append(
                    f"the runner's {kind} report cannot be read: {'; '.join(exc.messages)}"
                )
                continue
            if kind == Kind.JUNIT:
                tests = summary
                failing = failing_tests(content)
                if failing:
                    tests = {**summary, "failing": failing}
            attachments.append(Attachment(content, kind, name, media_type, summary, criteria))
        for number, earlier in enumerate(judged.earlier, 1):
            # The runs before the last keep their logs (a flaky test's failing run, to read);
            # only the last run's reports decide, and the runner's panel shows its log.
            if not earlier.log:
                continue
            name = f"runner-run-{number}.log"
            said = summarize(Kind.LOG, ContentFile(earlier.log, name=name))
            summary = {**said, "earlier_run": number}
            attachments.append(Attachment(earlier.log, Kind.LOG, name, "text/plain", summary))
        details = {
            "verified": True,
            "commit": result.commit,
            "base": result.base,
            # The same change byte for byte, up to line offsets, carries an approval
            # (tasks.landing.carried_approval).
            "change_id": result.change_id,
            "seconds": result.seconds,
            "mirror": result.mirror,
            "steps": result.steps,
            "tests": tests,
            "problems": result.problems,
            "runs": judged.runs,
            "flaky": judged.flaky,
        }
        counts = _counts(tests)
        if judged.own:
            summary = (
                f"a test this change adds or edits is flaky at {short} (it failed and then "
                f"passed at one commit): {', '.join(judged.own)}; make it pass every time "
                "and submit again"
            )
        elif judged.passed:
            summary = f"verified at {short} in {result.seconds:.1f} s{counts}"
            if judged.flaky:
                summary += (
                    f"; run {judged.runs} times: flaky, not the change's: "
                    f"{', '.join(judged.flaky[:FAILED_NAMED])}"
                )
        else:
            summary = f"the runner found problems at {short}: {'; '.join(result.problems)}{counts}"
            if judged.failing:
                summary += f"; failing: {', '.join(judged.failing)}"
            elif tests.get("failing"):
                # No test failed at every run: name the last run's failures as its own.
                at = " at the last run" if judged.runs > 1 else ""
                summary += f"; failing{at}: {', '.join(tests['failing'])}"
            if judged.runs > 1:
                summary += f" (the commit failed at each of its {judged.runs} runs)"
            if judged.note:
                summary += f"; {judged.note}"
        report = "\n".join(
            [
                f"# runner for {attempt}",
                "",
                f"Commit {result.commit} (merge base {result.base}), mirror {result.mirror}, "
                f"{result.seconds:.1f} s.",
                "",
                *[
                    f"- {step['name']}: `{step['command']}` {step['outcome']}"
                    for step in result.steps
                ],
                "",
                *([f"Problem: {problem}" for problem in result.problems] or ["Passed."]),
            ]
        )
        return Verdict(judged.passed, summary[:2000], details, report, attachments)


@dataclass
class Judged:
    """What the runs at one submitted commit decided (``judge``): ``result`` is the run
    whose reports are attached (the last), ``passed`` the gate's verdict. ``failing``:
    tests that failed at every run; ``flaky``: tests that failed at one run and passed at
    another; ``own``: those of them in files the change adds or edits, which fail it."""

    result: Result
    passed: bool
    runs: int = 1
    failing: list[str] = field(default_factory=list)
    flaky: list[str] = field(default_factory=list)
    own: list[str] = field(default_factory=list)
    note: str = ""
    earlier: list[Result] = field(default_factory=list, repr=False)  # the runs before it


def judge(project, commit: str, *, limit: float) -> Judged:
    """``commit`` judged by its runs as the lander judges a tree (``runner.judging``), so a
    flaky test of the base never fails an agent's attempt: a failing run is run again at
    the same commit, and a third time when its two runs failed by different tests. It
    passes only at a run that passed and only if no test the change adds or edits
    flaked; the other flaky tests are the project's (recorded, ``runner.signals.flaked``).
    A run starts again only while another as long fits in ``limit`` seconds (the gate's
    time limit)."""
    started = time.monotonic()
    results = runs(project=project, commit=commit)
    taken = [next(results)]
    # Read from copies: a report that cannot be read is said once, by ``verdict``.
    readings = [_read(taken[-1])]
    note = ""
    while not readings[-1].ok and len(readings) < RUNS:
        if len(readings) == RUNS - 1 and not judging.decide(readings).passed:
            break  # a test failed at both runs: the third would only confirm it
        took = time.monotonic() - started
        if took + took / len(readings) + MARGIN_SECONDS > limit:
            note = "not run again: another run would not end within the runner's time limit"
            break
        taken.append(next(results))
        readings.append(_read(taken[-1]))
    verdict = judging.decide(readings)
    result = taken[-1]
    passed = verdict.passed and verdict.result.passed
    own = []
    if passed and verdict.flaky:
        files = {judging.file_of(test) for test in verdict.flaky}
        own = judging.own_flaky(verdict.flaky, changed(project=project, result=result, among=files))
        others = [test for test in verdict.flaky if test not in own]
        if others:
            # Only the project's tests are its record: a test of the change's own is not
            # on the branch yet, and counting it would let an agent flake its own test
            # into the project's automatic quarantine.
            flaked.send(
                sender=RunnerGate,
                project=project,
                tests=others,
                tree=tree_of(project=project, result=result),
            )
    return Judged(
        result=result,
        passed=passed and not own,
        runs=verdict.runs,
        failing=verdict.failing[:FAILED_NAMED],
        flaky=verdict.flaky[:FAILED_NAMED],
        own=own[:FAILED_NAMED],
        note=note,
        earlier=taken[:-1],
    )


def _read(result: Result) -> judging.Run:
    return judging.read(replace(result, problems=[*result.problems]), set())


def _refused(error: CommitRefused) -> Verdict:
    return Verdict(False, str(error)[:2000], {"verified": False, "error": str(error)[:2000]})


def _counts(tests: dict) -> str:
    if not tests:
        return ""
    failed = tests.get("failed", 0) + tests.get("error", 0)
    total = tests.get("tests", 0)
    if failed:
        return f" ({failed} of {total} tests failed)"
    return f" ({total} tests, {tests.get('skipped', 0)} skipped)"


def failing_tests(content: bytes) -> list[str]:
    failing = []
    for case in junit_cases(ContentFile(content)):
        if case.outcome not in ("passed", "skipped"):
            failing.append(test_ids(case)[0])
            if len(failing) == FAILED_NAMED:
                break
    return failing
