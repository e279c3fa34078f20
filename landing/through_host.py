"""Landing through the task's pull request (``landing.mode: pull_request``, ADR 0041).

The lander builds and verifies a batch of one change exactly as it does for ``push``; then,
instead of pushing to the target, ``land`` puts the verified commit on the task's pull
request and has the host merge it:

1. the pull request's branch is force-updated, with a lease on the head the site last
   knew there (the approved commit, or a commit the site put there itself), to exactly
   the verified commit: the change built on the target's tip, so the branch is up to date;
2. the site's own checks are posted on that commit: the runner's verification and
   ``factory-memory/review`` (the reviewer approved these bytes, built onto the tip);
3. the target's other required checks (the team's CI) are waited for on that commit,
   up to ``FACTORY_LANDING_CHECKS_TIMEOUT`` seconds, looking again after
   ``FACTORY_LANDING_CHECKS_FIRST_LOOK_SECONDS``, then twice as long each time up to
   ``FACTORY_LANDING_CHECKS_POLL_SECONDS``, or at once when the host tells of a check or
   status on that commit (a webhook delivery, listened for every
   ``FACTORY_LANDING_CHECKS_LISTEN_MS``);
4. the pull request is merged pinned to that head, with the batch's method.

A manager's revert of a landed change (``land_revert``) goes the same way through a pull
request of its own: the verified revert is pushed to the branch
``factory-memory/revert-KEY-<landed commit>`` (a new branch, or one only the site wrote
to), its pull request is opened or updated, then steps 2 to 4 as above, the manager's
request standing as its review.

``landing`` sits below ``codehosts`` (the layers, ADR 0011): the host is reached through
``Host``, which ``codehosts`` registers at start (``register``), as the kernel is given its
checks (ADR 0031). Nothing here imports a host's client.
"""

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from django.conf import settings
from django.utils import timezone

from landing import git
from landing.errors import LandingError
from landing.locks import ensure_held
from landing.models import REVERT, Batch
from landing.pushing import TargetMoved
from landing.states import move
from landing.verifying import Runs
from projects.models import Project
from tasks.landing import attempt_landing_note, attempt_revert_note, heads_noted, pull_noted
from tasks.models import Attempt

logger = logging.getLogger(__name__)
NEWS_SKEW = timedelta(seconds=1)

# A check that counts as green, as GitHub counts it for a required check.
GREEN = {"success", "neutral", "skipped"}
HEADS_KEPT = 10  # the heads the site put on a pull request's branch, remembered per attempt


class HostTrouble(LandingError):
    """The host could not be asked, or could not act now (5xx, a time-out, a rate limit,
    credentials this process lacks): whether a write happened is unknown."""


class HostRefused(LandingError):
    """The host understood and refused; the text is the host's own words."""


class GoesBack(Exception):
    """The change goes back to its task with ``reason`` (its branch moved, a required
    check failed or stayed pending): a matter of the change, not of the machine."""

    def __init__(self, reason: str, details: dict | None = None):
        super().__init__(reason)
        self.reason = reason
        self.details = details or {}


class MaybeMerged(LandingError):
    """The merge was sent and its outcome cannot be read now: the batch stays ``pushing``,
    and the next lander settles it by asking the host (``merged``)."""


@dataclass(frozen=True)
class Pull:
    """A task's pull request as the host says it now."""

    number: int
    branch: str  # its head branch
    head: str  # the commit its branch holds
    base: str  # the branch it merges into
    open: bool
    merged: bool
    merge_commit: str = ""
    url: str = ""


@dataclass(frozen=True)
class Queued:
    """A pull request's entry in the host's merge queue: its ``state`` as the host names
    it, and the merge group built for it once there is one (``head`` merges the pull
    request onto ``base``)."""

    state: str
    head: str = ""
    base: str = ""


@dataclass(frozen=True)
class Checks:
    """The target's required checks and where each stands on one commit: ``pending``, or
    the conclusion in lower case."""

    required: tuple[str, ...]
    states: dict = field(default_factory=dict)


class Host(Protocol):
    """What the lander asks of a project's code host. Every call raises ``HostTrouble`` or
    ``HostRefused`` when the host cannot or will not answer."""

    def pull_request(self, attempt: Attempt) -> Pull:
        """The task's pull request (opened if the site has none yet for the attempt's
        branch), read from the host now."""
        ...

    def post_checks(
        self, attempt: Attempt, commit: str, *, runner: str, review: str, passed: bool = True
    ) -> None:
        """The runner's verification and ``factory-memory/review`` on ``commit``, with those
        summaries: success, or failure when not ``passed``."""
        ...

    def checks(self, branch: str, commit: str) -> Checks:
        """The required checks of ``branch`` and each one's state on ``commit``."""
        ...

    def heard_of_checks(self, commit: str, *, since: datetime) -> bool:
        """Whether the host told of a check or status on ``commit`` since ``since`` (a
        webhook delivery kept); asked of the database only, often."""
        ...

    def merge(self, pull: Pull, *, sha: str, method: str, title: str, message: str) -> str:
        """Merge ``pull`` pinned to ``sha``; the commit the host made on the target."""
        ...

    def revert_pull_request(self, attempt: Attempt, *, branch: str, title: str, body: str) -> Pull:
        """The pull request of the revert of ``attempt``'s landed change, from ``branch``
        into the project's target: opened, or the open one updated."""
        ...

    def pull(self, number: int) -> Pull:
        """Pull request ``number``, read from the host now."""
        ...

    def take_push(self, attempt: Attempt, pull: Pull) -> str:
        """The push that moved ``pull``'s head away from ``attempt``'s approved change, taken
        as its pusher's attempt where it is a member's; what came of it (empty: nothing, or
        the host could not say). Never raises: the change goes back either way."""
        ...

    def has_merge_queue(self, branch: str) -> bool:
        """Whether ``branch`` lands through the host's own merge queue."""
        ...

    def queued(self, pull: Pull) -> Queued | None:
        """``pull``'s entry in its target's merge queue, None when it is not queued."""
        ...

    def enqueue(self, pull: Pull, *, head: str) -> None:
        """Put ``pull`` into its target's merge queue, only while its head is ``head``."""
        ...

    def dequeue(self, pull: Pull) -> None:
        """Take ``pull`` out of its target's merge queue."""
        ...


_host = None


def register(factory) -> None:
    """Make ``factory(project)`` give the ``Host`` the lander lands through (codehosts,
    at start)."""
    global _host
    _host = factory


def host_for(project: Project) -> Host:
    if _host is None:
        raise LandingError("no code host is registered to land through pull requests")
    return _host(project)


def land(project: Project, path, batch: Batch, change, head: str, base: str, *, refused: int):
    """Land ``change`` (built at ``head`` on ``base`` and verified) through its pull request;
    the batch is ``pushing``. Returns the commit the host made on the target.

    Raises ``GoesBack`` (the change goes back: its branch moved, a required check failed,
    or stayed pending past the time limit, or the head moved under the merge);
    ``TargetMoved`` (the batch moved back to ``building``) when the target moved under the
    merge, fewer than ``FACTORY_LANDING_PUSH_TRIES`` times; ``MaybeMerged`` when the merge's
    outcome cannot be read; a ``LandingError`` for anything else (the change stays queued).
    """
    host = host_for(project)
    attempt = change.attempt
    ensure_held(project.pk)
    pull = host.pull_request(attempt)
    if not pull.open:
        raise GoesBack(
            f"landing failed: its pull request #{pull.number} was "
            f"{'merged' if pull.merged else 'closed'} on the host outside the queue; submit "
            "again from an open pull request",
            {"pull": pull.number},
        )
    if pull.base != batch.target:
        raise LandingError(
            f"its pull request #{pull.number} merges into {pull.base}, not {batch.target}; "
            "the next sync of the pull request puts it back"
        )
    if host.has_merge_queue(batch.target):
        # Which pull request lands it, kept before it is queued: the site's sync must never
        # propose the merged branch again (``codehosts.pulls``).
        note = {**pull_noted(attempt.landing), "number": pull.number, "branch": pull.branch}
        if not attempt_landing_note(attempt=attempt, pull=note):
            raise LandingError("the change left the queue before its pull request was queued")
        attempt.landing = {**attempt.landing, "pull": note}
        return _land_in_queue(
            project,
            batch,
            host,
            attempt,
            pull,
            base,
            approved=attempt.landing.get("commit", ""),
            review=lambda at: _review(attempt, at, batch.target),
            moved=lambda after: _moved(after, attempt, host),
        )
    known = heads_noted(attempt.landing)
    if pull.head not in known and pull.head != head:
        raise _moved(pull, attempt, host)
    if pull.head != head:
        # The intent first: a lander that dies after the push still knows the head as its own.
        heads = [*pull_noted(attempt.landing).get("heads", []), head][-HEADS_KEPT:]
        note = {"number": pull.number, "branch": pull.branch, "heads": heads}
        if not attempt_landing_note(attempt=attempt, pull=note):
            raise LandingError("the change left the queue before its pull request was updated")
        attempt.landing = {**attempt.landing, "pull": note}
        try:
            git.force_branch(
                path, project.repository_url, head, branch=pull.branch, expected=pull.head
            )
        except git.GitError as exc:
            again = host.pull_request(attempt)
            if again.head not in (pull.head, head):
                raise _moved(again, attempt, host) from exc
            raise LandingError(f"the push to {pull.branch} was refused: {exc}") from exc
    return _checked_and_merged(
        project,
        path,
        batch,
        host,
        attempt,
        pull,
        head,
        base,
        method=batch.method,
        review=_review(attempt, base, batch.target),
        again=lambda: host.pull_request(attempt),
        moved=lambda after: _moved(after, attempt, host),
        refused=refused,
    )


def land_revert(
    project: Project, path, batch: Batch, change, head: str, base: str, *, refused: int
):
    """Land a manager's revert (``change``: the landed change's, built as ``head``, the
    revert, on ``base`` and verified; the batch is ``pushing``) through a pull request of
    its own; returns the commit the host made on the target. The branch
    ``revert_branch(...)`` is set to ``head`` with a lease: it must not exist yet, or hold
    only commits the site put there (remembered on the revert's record, ``pull.heads``,
    before each push). Then as ``land``: the runner's and the review's checks (the review is
    the manager's request), the target's required checks, the merge pinned to ``head``
    with the project's method. Raises as ``land`` does; ``GoesBack`` sends the revert back
    (its branch holds someone else's commit, a required check failed or stayed pending)."""
    host = host_for(project)
    attempt = change.attempt
    task = attempt.task
    revert = (attempt.landing or {}).get("revert") or {}
    known = revert.get("pull") or {}
    branch = known.get("branch") or revert_branch(task.key, change.commit)
    ensure_held(project.pk)
    there = git.tip(path, branch)
    if there is not None and there not in known.get("heads", []):
        raise GoesBack(
            f"not reverted: its branch {branch} holds {there[:12]}, which the site did not put "
            "there (someone pushed to it); delete the branch and ask for the revert again",
            {"branch": branch, "head": there},
        )
    if there != head:
        # The intent first: a lander that dies after the push still knows the head as its own.
        known = {**known, "branch": branch, "heads": [*known.get("heads", []), head][-HEADS_KEPT:]}
        if not attempt_revert_note(attempt=attempt, pull=known):
            raise LandingError("the revert left the queue before its branch was pushed")
        try:
            git.force_branch(
                path, project.repository_url, head, branch=branch, expected=there or ""
            )
        except git.GitError as exc:
            raise LandingError(f"the push to {branch} was refused: {exc}") from exc
    by = revert.get("by") or "a manager"
    landed = change.commit
    pull = host.revert_pull_request(
        attempt,
        branch=branch,
        title=f"Revert {task.key}: {task.title}"[:256],
        body=(
            f"Reverts {landed} ({task.key}: {task.title}), asked by {by} on Factory Memory:\n\n"
            f"> {revert.get('reason', '')}\n\nBuilt onto {batch.target} at {base} and verified "
            "there by the site's lander, which merges it once the required checks pass."
        ),
    )
    if known.get("number") != pull.number:
        known = {**known, "branch": branch, "number": pull.number}
        attempt_revert_note(attempt=attempt, pull=known)

    def review(at: str) -> str:
        return (
            f"{by} asked for the revert of {landed} ({task.key}) on Factory Memory: "
            f"{revert.get('reason', '')}; the revert built onto {batch.target} at {at}"
        )

    def moved(after: Pull) -> GoesBack:
        return GoesBack(
            f"not reverted: the branch {branch} of pull request #{after.number} moved to "
            f"{after.head[:12]}, which is not the verified revert {head[:12]} (someone pushed "
            "to it); delete the branch and ask for the revert again",
            {"pull": after.number, "head": after.head},
        )

    if host.has_merge_queue(batch.target):
        return _land_in_queue(
            project, batch, host, attempt, pull, base, approved=head, review=review, moved=moved
        )
    return _checked_and_merged(
        project,
        path,
        batch,
        host,
        attempt,
        pull,
        head,
        base,
        method=project.landing_settings["method"],
        review=review(base),
        again=lambda: host.pull(pull.number),
        moved=moved,
        refused=refused,
    )


def _land_in_queue(
    project: Project,
    batch: Batch,
    host: Host,
    attempt,
    pull: Pull,
    base: str,
    *,
    approved: str,
    review: Callable[[str], str],
    moved: Callable[[Pull], GoesBack],
):
    """Land the change through the host's own merge queue (GitHub's, on a target that has
    one); returns the commit the target moved to. The host builds the merge groups, so
    the branch is not touched: its head must be the approved commit (else the change goes
    back, as a person's push). The site's checks are posted on that head and the
    target's required checks waited for there (the queue takes a pull request whose
    checks passed); then the pull request is enqueued at that head. For each merge group
    the host builds for it, the lander checks that the group's tree is its base plus the
    approved change and nothing else, verifies that tree in the sandbox (unless it is the
    tree the lander verified already), and posts ``factory-memory/runner`` and
    ``factory-memory/review`` on the group's head: success, or failure, taking it out of
    the queue. It waits, as long as ``FACTORY_LANDING_CHECKS_TIMEOUT``, until the host
    merged it (done) or removed it (the change goes back, naming the failing check)."""
    if pull.head != approved:
        raise moved(pull)
    if host.queued(pull) is None:
        host.post_checks(
            attempt,
            approved,
            runner=f"verified by the lander: batch {batch.pk}, tree {batch.tree}, built on "
            f"{batch.target} at {base}",
            review=review(base),
        )
        _wait_for_checks(host, batch, approved)
        ensure_held(project.pk)
        host.enqueue(pull, head=approved)
    deadline = time.monotonic() + settings.FACTORY_LANDING_CHECKS_TIMEOUT
    poll = settings.FACTORY_LANDING_CHECKS_POLL_SECONDS
    wait = min(settings.FACTORY_LANDING_CHECKS_FIRST_LOOK_SECONDS, poll)
    vouched = ""
    while True:
        looked = timezone.now() - NEWS_SKEW
        now = host.pull(pull.number)
        if now.merged:
            return now.merge_commit
        if now.head != approved:
            raise moved(now)
        entry = host.queued(now)
        if entry is None:
            raise _removed(host, batch, now, vouched)
        judged = entry.head and entry.head != vouched
        if judged and _vouch(
            project, batch, host, attempt, now, entry, approved, review(entry.base)
        ):
            vouched = entry.head
        if time.monotonic() >= deadline:
            _out_of_the_queue(host, now)
            raise GoesBack(
                f"landing failed: pull request #{now.number} was still in {batch.target}'s "
                f"merge queue on the host after {settings.FACTORY_LANDING_CHECKS_TIMEOUT} s "
                "(FACTORY_LANDING_CHECKS_TIMEOUT); the site took it out",
                {"pull": now.number, "group": entry.head},
            )
        _listen(
            host,
            entry.head or approved,
            since=looked,
            seconds=min(wait, deadline - time.monotonic()),
        )
        wait = min(wait * 2, poll)


def _vouch(
    project, batch: Batch, host: Host, attempt, pull: Pull, group: Queued, approved: str, review
):
    """Judge the merge group ``group`` the host built for ``pull``: it must stand on the
    target's tip, be that base plus the approved change, byte for byte, and pass the
    project's tests. Post the site's checks on its head, success; or failure, take the pull
    request out of the queue and send the change back. Returns whether it judged: a group
    behind another (someone else's pull request queued first) is not vouched for until it
    stands on the target itself, since GitHub merges a passing group with everything
    queued ahead of it, which nobody here approved."""
    path = git.fetch(project)
    if git.tip(path, batch.target) != group.base:
        return False
    tree = git.tree_of(path, group.head)
    expected = git.apply(path, group.base, approved, message="the approved change", method="merge")
    if isinstance(expected, git.Conflicted) or expected.tree != tree:
        _refuse_group(
            host,
            attempt,
            pull,
            group,
            f"the merge group {group.head} is not {group.base[:12]} plus the approved change "
            f"{approved[:12]}: it holds bytes no reviewer approved",
        )
    if tree != batch.tree:
        # The target moved since the lander built the change (a pull request queued ahead
        # of it merged): this tree was never verified.
        runs = Runs(project=project, path=path, batch=batch)
        try:
            verdict = runs.verify(1, group.head)
            alone = runs.verify(0, group.base) if not verdict.passed else None
        finally:
            runs.close()
        if alone is not None and not alone.passed:
            # The target fails on its own: nothing of this change's to blame.
            why = (
                f"{batch.target} at {group.base[:12]}, which the merge group of pull request "
                f"#{pull.number} stands on, fails the project's tests on its own: "
                f"{_failures(alone)}"
            )
            host.post_checks(attempt, group.head, runner=why, review=why, passed=False)
            _out_of_the_queue(host, pull)
            raise LandingError(f"{why}; the change stays queued")
        if not verdict.passed:
            _refuse_group(
                host,
                attempt,
                pull,
                group,
                f"the merge group {group.head} fails the project's tests: {_failures(verdict)}",
            )
        batch.tree, batch.result = tree, group.head
        batch.save(update_fields=["tree", "result"])
    host.post_checks(
        attempt,
        group.head,
        runner=f"verified by the lander: the merge group of pull request #{pull.number}, "
        f"tree {tree}, on {batch.target} at {group.base}",
        review=review,
    )
    return True


def _failures(verdict) -> str:
    return ", ".join(verdict.failing) or "; ".join(verdict.result.problems) or "it failed"


def _refuse_group(host: Host, attempt, pull: Pull, group: Queued, why: str):
    host.post_checks(attempt, group.head, runner=why, review=why, passed=False)
    _out_of_the_queue(host, pull)
    raise GoesBack(f"landing failed: {why}", {"pull": pull.number, "group": group.head})


def _out_of_the_queue(host: Host, pull: Pull) -> None:
    # Out already, if refused: a failing required check takes a pull request out at once.
    with contextlib.suppress(HostRefused):
        host.dequeue(pull)


def _removed(host: Host, batch: Batch, pull: Pull, group: str) -> GoesBack:
    """The host's merge queue let ``pull`` go without merging it: why, as far as the
    required checks on its last merge group (``group``) say."""
    failed = {}
    if group:
        checks = host.checks(batch.target, group)
        states = {name: checks.states.get(name, "pending") for name in checks.required}
        failed = {n: s for n, s in states.items() if s not in GREEN and s != "pending"}
    if failed:
        named = ", ".join(f"{name} ({state})" for name, state in failed.items())
        why = (
            f"the required check{'s' if len(failed) > 1 else ''} {named} of {batch.target} did "
            f"not pass on its merge group {group[:12]}"
        )
    else:
        why = "a person took it out, or the host did (its timeline on the host says why)"
    return GoesBack(
        f"landing failed: {batch.target}'s merge queue on the host let pull request "
        f"#{pull.number} go without merging it: {why}",
        {"pull": pull.number, "group": group, "checks": failed},
    )


def revert_branch(key: str, landed: str) -> str:
    """The branch a revert of ``key``'s change landed at ``landed`` is proposed from: one
    per landed commit, so a task landed, reverted and landed again gets a new one."""
    return f"factory-memory/revert-{key}-{landed[:12]}"


def _checked_and_merged(
    project, path, batch, host, attempt, pull, head, base, *, method, review, again, moved, refused
) -> str:
    """Steps 2 to 4 for ``pull`` at ``head``: the site's checks, the target's required
    checks waited for, the merge pinned to ``head``. ``again()`` reads the pull request
    anew and ``moved(pull)`` is the ``GoesBack`` of a head someone else moved."""
    host.post_checks(
        attempt,
        head,
        runner=f"verified by the lander: batch {batch.pk}, tree {batch.tree}, built on "
        f"{batch.target} at {base}",
        review=review,
    )
    _wait_for_checks(host, batch, head)
    ensure_held(project.pk)
    title, _, message = git.message_of(path, head).partition("\n")
    try:
        return host.merge(pull, sha=head, method=method, title=title, message=message)
    except HostRefused as exc:
        return _refused(project, batch, head, base, exc, again=again, moved=moved, refused=refused)
    except HostTrouble as exc:
        # The merge may have happened (a lost answer): the host says whether it did.
        try:
            after = again()
        except LandingError:
            raise MaybeMerged(
                f"the merge's answer was lost ({exc}); settled from the host"
            ) from exc
        if after.merged:
            return after.merge_commit
        raise HostTrouble(f"the host did not merge: {exc}") from exc


def check_merged_tree(project: Project, batch: Batch, merged: str) -> None:
    """The host's merge commit must hold exactly the verified tree: anything else on the
    target is a loud error (logged, and said on the batch), never silence."""
    try:
        path = git.fetch(project)
        tree = git.tree_of(path, merged)
    except git.GitError as exc:
        batch.reason = f"merged as {merged}; its tree could not be read back: {exc}"[:4000]
        logger.error("landing batch %s of %s: %s", batch.pk, project.slug, batch.reason)
        return
    if tree != batch.tree:
        batch.reason = (
            f"merged as {merged}, whose tree {tree} is NOT the verified tree {batch.tree}: "
            "the host merged something other than what the lander verified"
        )[:4000]
        logger.error("landing batch %s of %s: %s", batch.pk, project.slug, batch.reason)
    else:
        batch.reason = f"merged as {merged} through the pull request, tree {tree}"


def _moved(pull: Pull, attempt: Attempt, host: Host) -> GoesBack:
    """The change goes back: its pull request's branch moved to a head it did not approve.
    A member's push there becomes their attempt first (``Host.take_push``), before the task
    is ready for an agent to claim: their work is not raced by a new attempt."""
    taken = host.take_push(attempt, pull)
    return GoesBack(
        f"landing failed: the branch {pull.branch} of pull request #{pull.number} moved to "
        f"{pull.head[:12]}, which is not the approved commit {attempt.landing.get('commit', '')[:12]} "
        "(someone pushed to it after the approval)"
        + (
            f": {taken}"
            if taken
            else ": a member's push becomes the task's next attempt once the host tells of "
            "it (codehosts.pushes); else submit the branch as it is now for review"
        ),
        {"pull": pull.number, "head": pull.head},
    )


def _review(attempt: Attempt, base: str, target: str) -> str:
    who = attempt.reviewed_by.get_username() if attempt.reviewed_by else "a reviewer"
    return (
        f"{who} approved {attempt.landing.get('commit', '')} ({attempt}); these are the same "
        f"bytes, built onto {target} at {base}"
    )


def _wait_for_checks(host: Host, batch: Batch, head: str) -> None:
    """Wait for every required check of the target to be green on ``head``; a failing one,
    or one still pending at the time limit, sends the change back naming it."""
    deadline = time.monotonic() + settings.FACTORY_LANDING_CHECKS_TIMEOUT
    # A team's CI may answer in a second or in an hour: the first looks come soon, then
    # ever further apart, up to the poll interval (a fixed 15 s made every change wait 15 s
    # at least however quick the CI: bench/code_host_landing.py).
    poll = settings.FACTORY_LANDING_CHECKS_POLL_SECONDS
    wait = min(settings.FACTORY_LANDING_CHECKS_FIRST_LOOK_SECONDS, poll)
    while True:
        # News kept from a second before this look on wakes the next wait: the clocks of
        # the web process that kept a delivery and of this worker may differ a little.
        looked = timezone.now() - NEWS_SKEW
        checks = host.checks(batch.target, head)
        states = {name: checks.states.get(name, "pending") for name in checks.required}
        failed = {n: s for n, s in states.items() if s not in GREEN and s != "pending"}
        if failed:
            named = ", ".join(f"{name} ({state})" for name, state in failed.items())
            raise GoesBack(
                f"landing failed: the required check{'s' if len(failed) > 1 else ''} {named} "
                f"of {batch.target} did not pass on {head[:12]} (the change built on "
                f"{batch.target} at {batch.base[:12]})",
                {"checks": failed, "built": head, "base": batch.base},
            )
        pending = [name for name, state in states.items() if state == "pending"]
        if not pending:
            return
        if time.monotonic() >= deadline:
            raise GoesBack(
                f"landing failed: the required check{'s' if len(pending) > 1 else ''} "
                f"{', '.join(pending)} of {batch.target} still pending on {head[:12]} after "
                f"{settings.FACTORY_LANDING_CHECKS_TIMEOUT} s (FACTORY_LANDING_CHECKS_TIMEOUT)",
                {"pending": pending, "built": head, "base": batch.base},
            )
        _listen(host, head, since=looked, seconds=min(wait, deadline - time.monotonic()))
        wait = min(wait * 2, poll)


def _listen(host: Host, head: str, *, since: datetime, seconds: float) -> None:
    """Wait ``seconds``, or less: until the host tells of a check or status on ``head``
    received since ``since`` (the team's CI answering wakes the lander, which then looks)."""
    step = settings.FACTORY_LANDING_CHECKS_LISTEN_MS / 1000
    if step <= 0:
        time.sleep(max(0.0, seconds))
        return
    end = time.monotonic() + max(0.0, seconds)
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(step, left))
        if host.heard_of_checks(head, since=since):
            return


def _refused(project, batch, head, base, exc, *, again, moved, refused: int) -> str:
    """The host refused the merge: the target moved (build again on its tip), the pull
    request was closed or its head moved (the change goes back), or another reason (the
    batch errs, saying the host's words). Told apart by reading the target and the pull request again (``again()``),
    never by the words of the refusal."""
    path = git.fetch(project)
    if git.tip(path, batch.target) != base:
        refused += 1
        if refused >= settings.FACTORY_LANDING_PUSH_TRIES:
            raise LandingError(f"the target moved under every one of {refused} merges") from exc
        move(batch, "rebuild")
        raise TargetMoved(path) from exc
    after = again()
    if after.merged:
        return after.merge_commit
    if not after.open:
        # Closed by a person while it was being merged: erring would hold the queue behind
        # it (the same tip and head are not tried again, ADR 0020), so it goes back.
        raise GoesBack(
            f"landing failed: pull request #{after.number} was closed on the host while it "
            "was being merged; submit again from an open pull request",
            {"pull": after.number},
        ) from exc
    if after.head != head:
        raise moved(after) from exc
    raise LandingError(f"the host refused the merge of pull request #{after.number}: {exc}")


def merged(project: Project, batch: Batch) -> dict[int, str]:
    """For a dead lander's batch that was landing through the host: ``{attempt: commit}``
    for the change whose pull request the host says is merged (at the commit it made),
    else ``{}``. Raises ``LandingError`` when the host cannot be asked."""
    host = host_for(project)
    found = {}
    attempts = Attempt.objects.select_related("task").in_bulk(
        [item["attempt"] for item in batch.plan]
    )
    for item in batch.plan:
        attempt = attempts[item["attempt"]]
        if batch.method == REVERT:  # the revert's own pull request, not the task's
            number = ((attempt.landing.get("revert") or {}).get("pull") or {}).get("number")
            if number is None:  # its lander died before the pull request was opened
                continue
            pull = host.pull(number)
        else:
            pull = host.pull_request(attempt)
        if pull.merged and pull.merge_commit:
            found[item["attempt"]] = pull.merge_commit
    return found
