"""The verify step of a batch: each tree judged by its runs (``runner.judging.judge``), the
chain bisected to its first failing change, and, where there is room, the runs a bisection
may need next started beside the one it needs now (docs/landing.md, "The lander", step 4;
"Parallel verification where there is room")."""

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from django.conf import settings

from evidence.models import GateRun, GateRunState
from landing import flaky, git
from landing.errors import LandingError
from landing.models import Batch
from projects.models import Project
from projects.policy import measuring_gate_name
from runner import judging
from runner.gates import FAILED_NAMED
from runner.verify import CommitRefused, Result, verify_tree

FLAKY_LISTED = 50  # the flaky tests a batch names


@dataclass
class Runs:
    """The verify runs of one batch, by how many changes of the chain they include. Each
    tree is judged by ``runner.judging.judge``: a failure is seen twice before it counts,
    and three times (``confirm``) before it blames.

    Where there is room (``FACTORY_LANDING_VERIFY_PARALLEL`` > 1, and no submission waits
    for the runner), the runs a bisection may need next are started beside the one it
    needs now (``ahead``), in threads that only run the sandbox: every record is written
    here, in the lander's own thread. A run started ahead is counted when it starts
    (``verify_runs``) and, if nothing ever read it, as ``speculative_unused``.
    """

    project: Project
    path: object
    batch: Batch
    chain: list = field(default_factory=list)
    quarantine: set = field(default_factory=set)
    at: dict = field(default_factory=dict)
    verdicts: dict = field(default_factory=dict)  # count → its tree's verdict
    failing: dict = field(default_factory=dict)
    flakes: dict = field(default_factory=dict)
    started: dict = field(default_factory=dict)  # count → the first run started ahead
    pool: ThreadPoolExecutor | None = None

    def __post_init__(self):
        self.quarantine = flaky.quarantined(self.project)

    def commit_of(self, count: int, base: str) -> str:
        return self.chain[count - 1].built if count else base

    def verify(self, count: int, commit: str, *, then=()) -> judging.Verdict:
        """The verdict on the tree of ``count`` changes; ``then``: the counts the bisection
        needs next if it fails, started ahead beside its second run where there is room."""

        def first() -> Result:
            started = self.started.pop(count, None)
            return started.result() if started is not None else self._run(commit)

        def second() -> Result:
            self.ahead(then, base=self.batch.base)
            return self._run(commit)

        runs = iter((first, second))
        return self._judged(
            count, commit, judging.judge(lambda: next(runs)(), self.quarantine, self._seen)
        )

    def confirm(self, count: int, base: str) -> judging.Verdict:
        """The verdict on the tree of ``count`` changes, a failing one, after one more run:
        the tree whose failure is about to blame a change fails a third time first."""
        commit = self.commit_of(count, base)
        before = self.verdicts[count]
        verdict = judging.confirm(before, lambda: self._run(commit), self.quarantine, self._seen)
        return self._judged(count, commit, verdict, before=before)

    def _judged(self, count, commit, verdict, *, before=None) -> judging.Verdict:
        """Note ``verdict`` on the tree of ``count`` changes: the batch's counts, the flaky
        tests it found (recorded once per tree, ``before`` being what was noted of it)."""
        noted = set(before.flaky) if before else set()
        new = [test for test in verdict.flaky if test not in noted]
        self.batch.reruns += verdict.runs - (before.runs if before else 1)
        if new:
            self.batch.flaked += not noted
            known = self.batch.flaky
            self.batch.flaky = (
                known + [t for t in new if t not in known][: FLAKY_LISTED - len(known)]
            )
            # Only the project's tests are its record: a test a change of the batch adds or
            # edits is that change's own (held, ``lander._held``), and counting it would let
            # an agent flake its own test into the project's automatic quarantine.
            files = {judging.file_of(test) for test in new}
            theirs = git.changed_paths(self.path, self.batch.base, commit, among=files)
            project_tests = [test for test in new if judging.file_of(test) not in theirs]
            if project_tests:
                flaky.record(self.project, project_tests, tree=git.tree_of(self.path, commit))
        self.batch.save(update_fields=["reruns", "flaked", "flaky"])
        self.failing[count] = verdict.failing[:FAILED_NAMED]
        self.flakes[count] = verdict.flaky
        self.at[count] = verdict.result
        self.verdicts[count] = verdict
        return verdict

    def ahead(self, counts, *, base: str) -> None:
        """Start the first runs of ``counts`` in threads, as many as there is room for."""
        room = settings.FACTORY_LANDING_VERIFY_PARALLEL - 1
        free = room - sum(not run.done() for run in self.started.values())
        counts = [c for c in counts if c not in self.at and c not in self.started][:free]
        if not counts or _submissions_waiting():
            return
        if self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=room, thread_name_prefix="lander-verify")
        for count in counts:
            self.batch.verify_runs += 1
            self.started[count] = self.pool.submit(
                _verify_tree, self.project, self.path, self.commit_of(count, base)
            )
        self.batch.save(update_fields=["verify_runs"])

    def close(self) -> None:
        """Wait for the runs started ahead (a sandbox is never left running) and count
        those nobody read."""
        if self.pool is None:
            return
        cancelled = sum(run.cancel() for run in self.started.values())
        self.pool.shutdown(wait=True)
        self.batch.verify_runs -= cancelled  # never started: not a run
        self.batch.speculative_unused += len(self.started) - cancelled
        self.batch.save(update_fields=["verify_runs", "speculative_unused"])
        self.started.clear()
        self.pool = None

    def _run(self, commit: str) -> Result:
        self.batch.verify_runs += 1
        # Counted as they happen: a batch that ends any way at all says what it cost.
        self.batch.save(update_fields=["verify_runs", "bisect_steps"])
        return _verify_tree(self.project, self.path, commit)

    def _seen(self, run: judging.Run) -> None:
        flaky.count_runs(self.project, run)


def _verify_tree(project: Project, path, commit: str) -> Result:
    """One run of the sandbox at ``commit`` (no database: it may run in a thread)."""
    try:
        return verify_tree(project=project, path=path, sha=commit)
    except CommitRefused as exc:
        # The merged tree itself may not be checked out (over the size limit, a name the
        # disk cannot hold): a failed run, whose culprit bisecting finds like any other.
        result = Result(commit=commit, base="", mirror="built")
        result.problems.append(f"its tree cannot be checked out: {exc}")
        return result


def _submissions_waiting() -> bool:
    """Whether a submission's runner job waits for a worker: the lander then takes no
    more room than it needs."""
    name = measuring_gate_name()
    return (
        name is not None and GateRun.objects.filter(gate=name, state=GateRunState.QUEUED).exists()
    )


def bisection_points(good: int, bad: int) -> list[int]:
    """The prefix counts a bisection of (good, bad] may try, nearest first: the middle,
    then the middles of each half, and so on; the base (0) when the first change may be
    the culprit."""
    points, intervals = [], [(good, bad)]
    while intervals:
        low, high = intervals.pop(0)
        if high - low > 1:
            middle = (low + high) // 2
            points.append(middle)
            intervals += [(low, middle), (middle, high)]
        elif low == 0 and high == 1:
            points.append(0)
    return points


def verified_prefix(runs: Runs, base: str, chain: list) -> tuple[int, int | None]:
    """How many changes of ``chain`` pass together, and the index of the first that breaks
    them (None if all pass). Bisects: one verdict for the whole chain, then log2(n) more;
    where there is room, the prefixes it may need next are verified beside it. The tree
    that would blame a change is run once more first (``Runs.confirm``): if that run
    passes, its failures were flaky and the search goes on above it."""
    runs.chain = chain
    count = len(chain)
    try:
        runs.ahead(bisection_points(0, count), base=base)
        if runs.verify(count, chain[-1].built, then=bisection_points(0, count)).passed:
            return count, None
        good, failed = 0, [count]  # the prefixes judged failing, the smallest last
        while failed:
            bad = failed[-1]
            while bad - good > 1:
                middle = (good + bad) // 2
                runs.batch.bisect_steps += 1
                verdict = runs.verify(
                    middle, chain[middle - 1].built, then=bisection_points(good, middle)
                )
                if verdict.passed:
                    good = middle
                else:
                    bad = middle
                    failed.append(middle)
            if bad == 1:
                # The first change fails on the base: unless the base itself fails.
                base_run = runs.verify(0, base)
                if not base_run.passed:
                    raise LandingError(
                        f"the target itself fails its tests at {base[:12]}: "
                        f"{'; '.join(base_run.result.problems)}; nothing lands until it passes"
                    )
            if not runs.confirm(bad, base).passed:
                return good, bad - 1
            good = failed.pop()  # it passed at its third run: flaky, not broken
        return count, None
    finally:
        runs.close()


def bisect_bound(batch_size: int) -> int:
    """The most verify runs one culprit may cost a batch of ``batch_size``: each tree judged
    failing is run twice (``landing.flaky``): the whole chain, ceil(log2 n) bisect steps and
    the base, and the culprit's tree once more before it blames, 2·(ceil(log2 n)+2)+1."""
    return 2 * (math.ceil(math.log2(max(batch_size, 1))) + 2) + 1
