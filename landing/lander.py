"""The lander: approved changes reach the target branch only through a tree that passed.

``land(project)`` takes the project's lander lock (``landing.locks``: one lander per
project, anywhere) and works the queue until it is empty, a batch at a time:

1. fetch the mirror (``_look``); the target's tip is the base (``pushing.base_for``);
2. take up to ``batch_max`` queued changes in approval order (``land_batch``), resolve
   each approved commit in the mirror (``_resolve_commits``: one that is gone goes back),
   and build each onto the last (``_build``, ``landing.git.apply``); the batch goes on
   without a change that does not apply, which goes back with its paths and hunks once
   the batch has landed (or stays queued, if what it clashed with did not land). A first
   change whose batches ended ``FACTORY_LANDING_HEAD_ERRORS`` times in a row without a
   verdict goes back first if the target alone passes (``_heal``);
3. verify the last commit's tree in the sandbox (``_verify``, ``landing.verifying``: a
   failure is seen twice before it counts, ``runner.judging``); if it fails, bisect the
   chain to the first commit that fails, land the passing prefix and send the culprit
   back with its failing tests (the rest stay queued for the next batch); if the very
   first change fails, check the base: a target that fails on its own lands nothing and
   blames nobody. A change whose own test flaked goes back too, and the rest are built
   again without it if it was among those that passed;
4. land (``_land``): write the plan and the commit to push (the commit point), then push
   with a lease on the base (``landing.pushing``); if someone moved the target meanwhile,
   build again on the new tip (their commits kept), at most
   ``FACTORY_LANDING_PUSH_TRIES`` times. Landing through pull requests (``landing.mode:
   pull_request``, one change per batch), the commit goes on the task's pull request and
   the host merges it instead (``landing.through_host``), or sends the change back; such
   a batch left ``pushing`` is settled by asking the host, not git;
5. record (``_record``): mark each landed task done at the commit it landed at, store
   each run's JUnit and log as ``runner`` evidence on the attempts it judged, and send
   back the changes that clash with what landed.

A lander that dies anywhere leaves its batch active; the next lander (holding the lock,
so no other lander is alive) settles it from git alone (``landing.settling``): landed if
its commit is on the target, else abandoned, its changes still queued. No input stops
it: a report it cannot read is a failed run naming the problem, and any error (the
repository unreachable, no sandbox, a target that fails on its own, one nobody foresaw)
ends the batch as ``error`` with the reason, every change still queued. Then it backs
off (``landing.backoff``): it verifies nothing again until the target's tip or the
queue's head changes, or a manager asks. A change is taken into a batch under the lock a
dequeue takes; one dequeued after the queue was read is dropped. While a manager has
paused landing (``landing.pause``), it starts no batch.

A manager's revert of a landed change (``landing.services.revert_request``) is landed by
``land_revert`` in a batch of its own (method ``revert``), in its turn or the fast lane:
built, verified and pushed as above, or sent back with the reason.
"""

import logging
import time
from dataclasses import dataclass

from django.conf import settings
from django.utils import timezone

from evidence.services import evidence_measured
from landing import backoff, git, pause, pushing, reverting, through_host
from landing.errors import LandingError
from landing.locks import LockLost, lander_lock
from landing.models import ACTIVE_BATCH_STATES, BEFORE_PUSH, REVERT, Batch, BatchState
from landing.settling import errors_in_a_row, note, settle_dead_batches
from landing.states import move
from landing.verifying import Runs, verified_prefix
from projects import metrics
from projects.errors import Conflict
from projects.models import Project
from runner import judging
from runner.gates import FAILED_NAMED
from runner.verify import CommitRefused, Result, RunnerUnavailable
from tasks.landing import (
    attempt_landing_note,
    landing_queue,
    revert_goes_first,
    revert_queue,
    task_land,
    task_landing_return,
)
from tasks.models import Attempt

logger = logging.getLogger(__name__)


@dataclass
class Change:
    """One queued change in a batch: its attempt, the approved commit, what it became."""

    attempt: Attempt
    commit: str = ""
    built: str = ""  # the commit on the chain that carries it
    parent: str = ""  # the commit of the chain it was built on
    outcome: str = "queued"
    reason: str = ""

    @property
    def key(self) -> str:
        return self.attempt.task.key


def land(project: Project) -> dict:
    """Work ``project``'s landing queue until it is empty; see the module docstring.

    Returns counts of what happened; ``{"busy": True}`` when another lander holds the
    project (it works the same queue, and looks again before it lets go);
    ``{"backing_off": True}`` when it stopped because nothing changed since a batch erred;
    ``{"paused": True}`` when a manager paused landing (``landing.pause``); ``reverted``
    counts the reverts it landed, once it tried one.
    """
    counts = {"batches": 0, "landed": 0, "returned": 0, "settled": 0}
    while True:
        if pause.paused(project):
            return {**counts, "paused": True}  # a manager's resume wakes it
        if backoff.resting(project):
            # Answered from the database alone: no lock, no git, no sandbox.
            return {**counts, "backing_off": True}
        with lander_lock(project.pk) as held:
            if not held:
                return {**counts, "busy": True}
            try:
                if not _work_queue(project, counts):
                    return counts  # stopped on an error, backing off: the reconciler wakes it
            except LockLost as exc:
                # Stopped as a dead lander would: the next one settles its batch from git.
                logger.warning("the lander of %s stopped: %s", project.slug, exc)
                return {**counts, "lock_lost": True}
        # An approval that came while this lander was letting go found the lock held:
        # look once more after letting go, so no change waits for the reconciler.
        project = Project.objects.get(pk=project.pk)
        if not (
            project.lands
            and (landing_queue(project.pk).exists() or revert_queue(project.pk).exists())
        ):
            return counts


def _work_queue(project: Project, counts: dict) -> bool:
    """Land batches until the queue is empty (True), or a batch errs or nothing changed
    since one did (False: backing off)."""
    try:
        counts["settled"] += settle_dead_batches(project)
    except Exception as exc:  # the repository unreachable: the dead batch waits, said
        head = landing_queue(project.pk).first()
        reason = f"a stopped lander's batch cannot be settled: {_said(exc)}"[:4000]
        logger.warning("landing of %s: %s", project.slug, reason)
        if head is not None:
            backoff.record(project, head=head, tip="", reason=reason, verified=False)
        return False
    while True:
        project = Project.objects.get(pk=project.pk)
        if not project.lands:
            return True
        if pause.paused(project):
            return True  # paused meanwhile: the batches so far stand; land() says paused
        # Through a pull request, one change per merge (ADR 0041).
        room = 1 if project.lands_through_host else project.landing_settings["batch_max"]
        queue = batch_of(list(landing_queue(project.pk)[:room]))
        # A manager's revert lands in its turn (or the fast lane), always alone.
        revert = revert_queue(project.pk).first()
        if revert is not None and not revert_goes_first(revert, queue[0] if queue else None):
            revert = None
        if not queue and revert is None:
            backoff.forget(project, reason="nothing is queued")
            return True
        head = revert or queue[0]
        path, tip = _look(project)
        if pause.paused(project):
            return True  # paused while the mirror was fetched: asked again just before a batch
        if backoff.holds(project, tip=tip, head=head):
            counts["backing_off"] = True
            return False
        if revert is not None:
            batch = land_revert(project, revert, path=path)
        else:
            batch = land_batch(project, queue, path=path)
        counts["batches"] += 1
        counts["landed"] += sum(c["outcome"] == "landed" for c in batch.changes)
        if revert is not None:
            counts["reverted"] = counts.get("reverted", 0) + (batch.state == BatchState.LANDED)
        counts["returned"] += sum(c["outcome"] in ("conflict", "failed") for c in batch.changes)
        if batch.state == BatchState.ERROR:
            backoff.record(
                project,
                head=head,
                tip=batch.base,
                reason=batch.reason,
                verified=batch.verify_runs > 0 and not getattr(batch, "host_trouble", False),
                batch=batch,
            )
            return False  # nothing moved: looking again now would find the same
        if not batch.changes:
            continue  # every change it read had left the queue: read it again
        if batch.state in (BatchState.ABANDONED, *ACTIVE_BATCH_STATES):
            return False  # left for the next lander to settle
        backoff.forget(project, reason=f"batch {batch.pk} {batch.state}")


def batch_of(queue: list[Attempt]) -> list[Attempt]:
    """What of the queue's head one batch takes: all of it, but a change a manager put in
    the fast lane alone goes in a batch by itself, and the changes before it go without it."""
    for index, attempt in enumerate(queue):
        if (attempt.landing.get("fast") or {}).get("alone"):
            return queue[: max(index, 1)]
    return queue


def _look(project: Project) -> tuple[object, str | None]:
    """The mirror, fetched, and the target's tip; (None, None) when they cannot be read
    (``land_batch`` then tries again and records why in its batch)."""
    try:
        path = git.fetch(project)
        return path, git.tip(path, project.landing_target)
    except Exception:  # said by the batch that meets it again
        return None, None


def _said(exc: BaseException) -> str:
    """An error in words: a refusal's own text, else its kind and message."""
    detail = getattr(exc, "detail", None)
    if detail:
        return str(detail)
    if isinstance(exc, (LandingError, RunnerUnavailable, CommitRefused, git.GitError)):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def land_batch(project: Project, queue: list[Attempt], *, path=None) -> Batch:
    """Land what it can of ``queue`` (approval order) in one batch; return the batch.

    Each change is taken under the lock a manager's dequeue takes (``attempt_landing_note``
    marks it ``landing``, and a dequeue then waits for the batch); a change that left the
    queue after it was read is dropped. ``path``: the mirror, already fetched. Whatever
    goes wrong ends the batch: ``error`` with the reason, its changes still queued.
    """
    started = time.monotonic()
    batch = Batch.objects.create(
        project=project,
        target=project.landing_target,
        method=project.landing_settings["method"],
        changes=[
            _change_record(Change(attempt=a, commit=a.landing.get("commit", ""))) for a in queue
        ],
    )
    changes = [
        Change(attempt=a, commit=a.landing.get("commit", ""))
        for a in queue
        if attempt_landing_note(attempt=a, state="landing", batch=batch.pk, reason="")
    ]
    if not changes:
        batch.reason = "every change it read had left the queue before it was taken"
    try:
        if changes:
            _work(project, batch, changes, started, path)
    except through_host.MaybeMerged as exc:
        # The merge's answer was lost: only the host can tell whether it happened.
        _unforeseen(project, batch, changes, _said(exc), counted=False)
        if batch.state == BatchState.PUSHING:
            return batch
    except (LandingError, RunnerUnavailable, CommitRefused, git.GitError, Conflict) as exc:
        # The host's trouble passes by itself: tried again on the back-off's schedule, not
        # held until the target or the queue changes (not saved: read by _work_queue), and
        # never counted against the change at the head (``_heal``): a host answering 502
        # is nobody's change's fault.
        trouble = isinstance(exc, through_host.HostTrouble)
        _error(project, batch, changes, _said(exc), counted=not trouble)
        batch.host_trouble = trouble
    except LockLost:
        raise  # another lander may hold the project now: this one changes nothing more
    except Exception as exc:  # No input stops the lander: this batch ends, saying why.
        logger.exception("landing batch %s of %s", batch.pk, project.slug)
        _unforeseen(project, batch, changes, _said(exc))
        if batch.state == BatchState.PUSHING:
            return batch  # whether it landed, only git can tell: the next lander settles it
    if batch.state != BatchState.ERROR:
        # Those behind a culprit wait for the next batch: no longer "landing" in this one;
        # a batch that reached a verdict ends the count of those without one.
        for change in changes:
            if change.outcome == "queued":
                attempt_landing_note(attempt=change.attempt, state="queued", batch=None, errors=0)
    return _end_batch(project, batch, changes, started)


def _end_batch(project: Project, batch: Batch, changes: list[Change], started: float) -> Batch:
    """End a batch whose lander is done with it (not one left ``pushing`` for git to
    settle): record where each change ended, its seconds and ``ended_at``; one that never
    pushed and did not err lands nothing (``end``: returned if a change went back, else
    abandoned); save it and count it in the metrics. Returns the batch."""
    batch.changes = [_change_record(change) for change in changes]
    batch.seconds = round(time.monotonic() - started, 3)
    batch.ended_at = timezone.now()
    if batch.state in BEFORE_PUSH:
        move(batch, "end", returned=any(c.outcome != "queued" for c in changes))
    batch.save()
    metrics.landing_batch_ended(project=project.slug, state=batch.state, runs=batch.verify_runs)
    return batch


def _error(
    project: Project, batch: Batch, changes: list[Change], reason: str, *, counted: bool = True
) -> None:
    """Nothing can be decided about the changes: the batch ends ``error`` with the reason,
    and every change not yet decided stays queued, saying it. ``counted``: the batch counts
    toward the first change's errors in a row (``_heal``); the host's trouble does not."""
    move(batch, "err", why=f"nothing landed: {reason}"[:4000])
    for index, change in enumerate(changes):
        if change.outcome in ("queued", "landing"):
            # The first change counts the batches in a row that ended without a verdict.
            first = index == 0 and counted
            errors = {"errors": errors_in_a_row(change.attempt) + 1} if first else {}
            note(batch, change.attempt, state="error", reason=batch.reason, **errors)
    logger.warning("landing batch %s of %s: %s", batch.pk, project.slug, batch.reason)


def _unforeseen(
    project: Project, batch: Batch, changes: list[Change], reason: str, *, counted: bool = True
) -> None:
    """An error nobody foresaw. Before the push it is an ``error`` like any other. After the
    push was sent (``pushing``) only git can tell whether the changes landed: the batch is
    settled from git as a dead lander's is, landed, or an ``error`` if the push did not
    reach the target (left ``pushing`` for the next lander if git cannot be asked either).
    After its changes were marked landed, the batch stays ``landed``, saying what followed."""
    if batch.state == BatchState.LANDED:
        batch.reason = f"landed; then: {reason}"[:4000]
        return
    if batch.state != BatchState.PUSHING:
        _error(project, batch, changes, reason, counted=counted)
        return
    batch.save(update_fields=["verify_runs", "bisect_steps", "pushes"])
    try:
        settle_dead_batches(project)
    except Exception:  # the next lander settles it (it stays ``pushing`` till then)
        logger.exception("landing batch %s of %s: not settled", batch.pk, project.slug)
    batch.refresh_from_db()
    for change in changes:
        change.outcome = next(
            (c["outcome"] for c in batch.changes if c["attempt"] == change.attempt.pk),
            change.outcome,
        )
    if batch.state == BatchState.LANDED:
        batch.reason = f"landed, settled from the target after: {reason}"[:4000]
    elif batch.state == BatchState.ABANDONED:
        _error(
            project, batch, changes, f"its push did not reach the target: {reason}", counted=counted
        )


def _change_record(change: Change) -> dict:
    """A change as its batch records it (``Batch.changes``)."""
    return {
        "attempt": change.attempt.pk,
        "task": change.key,
        "commit": change.commit,
        "built": change.built,
        "outcome": change.outcome,
        "reason": change.reason,
    }


def _work(project: Project, batch: Batch, changes: list[Change], started: float, path) -> None:
    """The steps of a batch once its changes are taken (the module docstring's 2 to 5):
    the commits resolved and a head that cannot be judged healed; then the chain built on
    the target's tip, verified, landed and recorded. Built again when the target moved
    under the push, or when a change among those that passed went back, held."""
    if not project.repository_url:
        raise LandingError("the project has no repository to land on (repository_url)")
    if path is None:
        path = git.fetch(project)
    _resolve_commits(path, changes)
    _heal(project, batch, path, changes)
    pushes_refused = 0
    while True:
        base = pushing.base_for(path, batch)
        pending = [c for c in changes if c.outcome in ("queued", "landing")]
        chain, clashes = _build(path, batch, base, pending)
        if not chain:
            _return_conflicts(batch, clashes, landed=0, tip=base)
            return
        verified = _verify(project, path, batch, base, chain)
        if verified.holds_one_held:
            # What passed holds a change that went back for its own flaky test: build the
            # rest again without it (each round returns one at least, so this ends).
            continue
        if not verified.landing:
            batch.save(update_fields=["verify_runs", "bisect_steps"])
            _return_conflicts(batch, clashes, landed=0, tip=base)
            return
        try:
            commits = _land(project, path, batch, verified.landing, base, refused=pushes_refused)
        except pushing.TargetMoved as moved:
            # Someone else moved the target: build again on their tip, keeping their work.
            path = moved.path
            pushes_refused += 1
            continue
        except through_host.GoesBack as back:
            _return_from_host(batch, verified, back)
            return
        _record(project, batch, verified, commits, clashes, started)
        return


def _resolve_commits(path, changes: list[Change]) -> None:
    """Each change's approved commit by its full object id in the mirror; a change whose
    commit is not there any more goes back, saying so."""
    for change in changes:
        full = git.resolve(path, change.commit) if change.commit else None
        if full is None:
            _return(
                change,
                "failed",
                f"landing failed: the approved commit {change.commit[:12] or '(none)'} is not in "
                "the repository any more; push it again and submit a new attempt",
                {},
            )
        else:
            change.commit = full


def _heal(project: Project, batch: Batch, path, changes: list[Change]) -> None:
    """When the first change still queued has had ``FACTORY_LANDING_HEAD_ERRORS`` batches
    in a row end without a verdict, verify the target alone. If it passes, the change is
    what keeps failing to be judged (it hangs, or takes its lander down with it): it goes
    back with the reason, rather than holding everyone behind it. If the target fails too,
    nothing is returned: the target is red (``LandingError``, as a red target always is)."""
    head = next((c for c in changes if c.outcome in ("queued", "landing")), None)
    if head is None or errors_in_a_row(head.attempt) < settings.FACTORY_LANDING_HEAD_ERRORS:
        return
    base = git.tip(path, batch.target)
    if base is None:
        raise LandingError(f"the repository has no branch {batch.target!r} to land on")
    move(batch, "verify", base=base)
    verdict = Runs(project=project, path=path, batch=batch).verify(0, base)
    if not verdict.passed:
        raise LandingError(
            f"the target itself fails its tests at {base[:12]}: "
            f"{'; '.join(verdict.result.problems)}; nothing lands until it passes"
        )
    was = (head.attempt.landing or {}).get("reason") or "no reason was recorded"
    _return(
        head,
        "failed",
        f"landing failed: its batches ended {errors_in_a_row(head.attempt)} times in a row "
        f"without a verdict while {batch.target} alone passes at {base[:12]} (the last: "
        f"{was}); make its tests finish within the project's time limit and submit again",
        {"base": base, "errors": errors_in_a_row(head.attempt)},
    )


@dataclass
class Clash:
    """A change that did not apply onto the chain after ``ahead`` changes of it."""

    change: Change
    conflict: git.Conflicted
    ahead: int
    parent: str


def _build(path, batch: Batch, base: str, pending: list[Change]) -> tuple[list[Change], list]:
    """Build ``pending`` onto ``base`` in order; return the changes that applied, each with
    the commit that carries it, and the clashes of those that did not (``Clash``)."""
    chain, clashes, parent = [], [], base
    for change in pending:
        task = change.attempt.task
        version = change.attempt.spec_version
        message = git.message(
            task,
            change.attempt,
            reviewer=change.attempt.reviewed_by.get_username()
            if change.attempt.reviewed_by
            else "",
            spec=f"{version.spec.key} v{version.number}" if version is not None else "",
        )
        built = git.apply(path, parent, change.commit, message=message, method=batch.method)
        if isinstance(built, git.Conflicted):
            clashes.append(Clash(change, built, len(chain), parent))
            continue
        # A change already on the target adds nothing: it lands as the commit it sits on.
        change.parent = parent
        change.built = parent if built.empty else built.commit
        parent = change.built
        chain.append(change)
    return chain, clashes


@dataclass
class Verified:
    """What verifying a chain found: its first ``good`` changes passed; ``culprit`` (an
    index of the chain, or None) failed; ``held``: the changes (by index) whose own tests
    flaked. The culprit and the held changes have gone back."""

    runs: Runs
    chain: list[Change]
    good: int
    culprit: int | None
    held: dict[int, list[str]]

    @property
    def landing(self) -> list[Change]:
        """The changes that passed: those that land."""
        return self.chain[: self.good]

    @property
    def holds_one_held(self) -> bool:
        """Whether what passed holds a change that went back for its own flaky test."""
        return any(index < self.good for index in self.held)


def _verify(project: Project, path, batch: Batch, base: str, chain: list[Change]) -> Verified:
    """Verify ``chain`` built on ``base`` in the sandbox, bisecting to the first change
    that fails (``landing.verifying.verified_prefix``); send back the culprit with its
    failing tests, and each change whose own test flaked. Returns what passed."""
    move(batch, "verify", base=base)
    runs = Runs(project=project, path=path, batch=batch)
    good, culprit = verified_prefix(runs, base, chain)
    held = _held(runs, path, chain, culprit)
    if culprit is not None:
        _return_culprit(runs, batch, base, chain, culprit)
    for index, tests in held.items():
        _return_held(runs, batch, chain, index, tests)
    return Verified(runs=runs, chain=chain, good=good, culprit=culprit, held=held)


def _held(runs: Runs, path, chain: list[Change], culprit: int | None) -> dict[int, list[str]]:
    """The changes of ``chain`` (by index) whose own tests flaked at a tree that held them:
    a test in a file the change adds or edits. The culprit goes back for its failure."""
    held: dict[int, list[str]] = {}
    for count, tests in runs.flakes.items():
        for index, change in enumerate(chain[:count]):
            if index == culprit or not tests:
                continue
            files = {judging.file_of(test) for test in tests}
            paths = git.changed_paths(path, change.parent, change.built, among=files)
            own = judging.own_flaky(tests, paths)
            for test in own:
                held.setdefault(index, [])
                if test not in held[index]:
                    held[index].append(test)
    return held


def _return_culprit(runs: Runs, batch: Batch, base: str, chain: list[Change], index: int) -> None:
    culprit = chain[index]
    result = runs.at[index + 1]
    failing = runs.failing[index + 1]
    ahead = [c.key for c in chain[:index]]
    reason = (
        f"landing failed: passes at its own commit {culprit.commit[:12]}; fails on "
        f"{batch.target} at {base[:12]}"
        + (f" with {', '.join(ahead)}" if ahead else "")
        + f": {'; '.join(result.problems)}"
        + (f"; failing: {', '.join(failing)}" if failing else "")
    )
    _return(culprit, "failed", reason, {"failing": failing, "with": ahead, "base": base})
    _store(culprit, result, runs)


def _return_held(runs: Runs, batch: Batch, chain: list[Change], index: int, tests: list[str]):
    """Send back a change whose own test is flaky: nobody lands a coin-toss test of their
    own (a manager's quarantine of that test lets it through)."""
    change = chain[index]
    named = ", ".join(tests[:FAILED_NAMED])
    reason = (
        f"landing held: a test this change adds or edits is flaky on {batch.target} at "
        f"{batch.base[:12]} (it failed and then passed at one tree): {named}; make it "
        "pass every time and submit again"
    )
    _return(change, "failed", reason, {"flaky": tests[:FAILED_NAMED], "base": batch.base})


def _land(
    project: Project, path, batch: Batch, landing: list[Change], base: str, *, refused: int
) -> list[str]:
    """Put ``landing`` on the target: write the plan and the commit to push (the commit
    point), then push with a lease on ``base`` (``landing.pushing``), or, landing through
    pull requests, have the host merge the task's pull request (``landing.through_host``).
    ``refused``: how many of the batch's pushes the target moved under before. Returns the
    commit each change landed at: its own on the chain, or the host's merge. Raises
    ``TargetMoved`` (build again on the new tip) and ``GoesBack`` (the host sent the change
    back), as those modules say."""
    head = landing[-1].built
    through = project.lands_through_host
    move(
        batch,
        "push",
        result=head,
        tree=git.tree_of(path, head),
        plan=[
            {"attempt": c.attempt.pk, "built": c.built, **({"pull": True} if through else {})}
            for c in landing
        ],
    )
    if through:
        merged = through_host.land(project, path, batch, landing[0], head, base, refused=refused)
        return [merged for _ in landing]
    pushing.push(project, path, batch, head, base, refused=refused)
    return [change.built for change in landing]


def _return_from_host(batch: Batch, verified: Verified, back: through_host.GoesBack) -> None:
    """The host sent the change back after the push (its branch moved, a required check
    failed or stayed pending): it goes back with the reason, the batch is ``returned``,
    and the runs are stored."""
    _return(verified.landing[0], "failed", back.reason, back.details)
    move(batch, "back", why=back.reason)
    _store_runs(verified)


def _record(
    project: Project,
    batch: Batch,
    verified: Verified,
    commits: list[str],
    clashes: list[Clash],
    started: float,
) -> None:
    """What landed, recorded: each task done at the commit it landed at, the batch
    ``landed`` (a merge through the host read back against the verified tree), each run
    stored on the attempts it judged, and the changes that clash with what landed sent
    back."""
    seconds = time.monotonic() - started
    for change, commit in zip(verified.landing, commits, strict=True):
        task_land(attempt=change.attempt, commit=commit, batch=batch.pk, seconds=seconds)
        change.outcome = "landed"
    move(batch, "reach")
    if project.lands_through_host:
        through_host.check_merged_tree(project, batch, commits[-1])
    _store_runs(verified)
    _return_conflicts(batch, clashes, landed=verified.good, tip=verified.landing[-1].built)


def _return_conflicts(batch: Batch, clashes: list[Clash], *, landed: int, tip: str) -> None:
    """Send back the changes that clash with what is now on the target: those built on no
    more of the chain than landed. A change that clashed only with changes that did not
    land (a culprit, or those behind it) stays queued, to be built again on the new tip."""
    for clash in clashes:
        if clash.ahead > landed:
            continue
        _return(
            clash.change,
            "conflict",
            f"landing failed: {clash.conflict.text()}: rebase onto {batch.target} "
            f"(at {tip[:12]}) and submit again",
            {
                "paths": clash.conflict.paths,
                "hunks": clash.conflict.hunks,
                "against": clash.conflict.against,
                "base": tip,
            },
        )


def _return(change: Change, state: str, reason: str, details: dict) -> None:
    change.outcome, change.reason = state, reason
    task_landing_return(attempt=change.attempt, state=state, reason=reason, details=details)


def _store_runs(verified: Verified) -> None:
    """Each landed change gets the run of the tree that landed; the rest that were built
    but not landed nor blamed get the run of the whole chain."""
    runs, chain, good = verified.runs, verified.chain, verified.good
    for index, change in enumerate(chain):
        if index < good:
            _store(change, runs.at[good], runs)
        elif index != verified.culprit:
            _store(change, runs.at[len(chain)], runs)


def _store(change: Change, result: Result, runs: Runs) -> None:
    tree = git.tree_of(runs.path, result.commit)
    header = (
        f"[lander] batch {runs.batch.pk}: commit {result.commit} tree {tree} "
        f"on {runs.batch.target} at {runs.batch.base}\n"
    ).encode()
    files = [("log", header + result.log, "landing.log", "text/plain")]
    if result.junit is not None:
        files.append(("junit", result.junit, "landing-junit.xml", "application/xml"))
    evidence_measured(attempt=change.attempt, files=files)


# --- Undo: a manager's revert, landed as a batch of its own ---------------------------------


def land_revert(project: Project, attempt: Attempt, *, path=None) -> Batch:
    """Land the queued revert of ``attempt``'s landed change in a batch of its own: built
    with ``git revert`` of the landed commit onto the target's tip, verified there like any
    change (a failure seen twice; a target that fails on its own lands nothing), pushed
    with a lease on that tip (built again if someone moved it). A revert that does not apply
    or whose tests fail comes back with the reason (``attempt_revert_return``: the task
    stays done); one that lands reopens the task (``task_revert_land``). Landing through
    pull requests, the revert's own pull request is merged by the host instead of the push
    (``landing.through_host.land_revert``). Whatever else goes wrong ends the batch
    ``error`` with the revert still queued, as for any batch."""
    started = time.monotonic()
    change = Change(attempt=attempt, commit=attempt.task.landed_commit)
    batch = Batch.objects.create(
        project=project,
        target=project.landing_target,
        method=REVERT,
        changes=[_change_record(change)],
    )
    changes = [change] if note(batch, attempt, state="landing", batch=batch.pk) else []
    if not changes:
        batch.reason = "the revert had left the queue before it was taken"
    try:
        if changes:
            reverting.revert(project, batch, change, path)
    except through_host.MaybeMerged as exc:
        # The merge of the revert's pull request was sent and its answer lost.
        _unforeseen(project, batch, changes, _said(exc))
        if batch.state == BatchState.PUSHING:
            return batch
    except (LandingError, RunnerUnavailable, CommitRefused, git.GitError, Conflict) as exc:
        _error(project, batch, changes, _said(exc))
        batch.host_trouble = isinstance(exc, through_host.HostTrouble)
    except LockLost:
        raise
    except Exception as exc:  # No input stops the lander: this batch ends, saying why.
        logger.exception("revert batch %s of %s", batch.pk, project.slug)
        _unforeseen(project, batch, changes, _said(exc))
        if batch.state == BatchState.PUSHING:
            return batch
    return _end_batch(project, batch, changes, started)
