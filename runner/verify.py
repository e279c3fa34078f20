"""One verification: a commit of a project's repository, checked out and tested in the sandbox.

``verify`` fetches the project's mirror, checks the commit out into a fresh workspace,
computes the diff from the merge base with the default branch itself, runs the verify
block's setup commands (with the network if the project allows it) and its test command
(never with the network) in the sandbox, and reads the reports the test wrote. It
returns what it measured as a ``Result``. What went wrong is told apart by what it is:
the server's own trouble (the repository unreachable, no sandbox, no disk room) is a
``RunnerUnavailable``, which the gate machinery retries with back-off; anything about
the submitted commit (not in the repository, no history shared with the default branch,
a tree that cannot or may not be checked out) is a ``CommitRefused`` saying what is
wrong. The workspace is gone when ``verify`` returns, however it ends (or, if it
cannot be removed, left for the sweep; that never changes the result).
"""

import io
import os
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from projects import metrics
from runner import cache
from runner import mirror as git
from runner.sandbox import Limits, SandboxUnavailable, sandbox


class RunnerUnavailable(RuntimeError):
    """The server's own trouble: nothing could be measured, and the submitted commit is not
    to blame. The message says why (git's own words, or the sandbox's)."""


class CommitRefused(RuntimeError):
    """The submitted commit cannot be verified as it stands; the message says what is wrong
    with it. The submission's fault, never the machine's."""


class CommitNotFound(CommitRefused):
    """The repository answered, but the submitted commit is not in it (not pushed, or made up)."""


class ReportProblem(ValueError):
    """A report the test should have written is missing, unsafe or too large."""


@dataclass
class Result:
    """What the runner measured at one commit. ``problems`` empty means it passed."""

    commit: str
    base: str
    mirror: str
    seconds: float = 0.0
    steps: list[dict] = field(default_factory=list)
    log: bytes = b""
    junit: bytes | None = None
    coverage: bytes | None = None
    diff: bytes = b""
    # What the change is byte for byte, up to line offsets (``runner.mirror.change_id``).
    change_id: str = ""
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems


def _owner() -> int | None:
    # The sandbox drops to FACTORY_RUNNER_UID only when the worker is root; otherwise
    # the worker's own user writes the workspace.
    return settings.FACTORY_RUNNER_UID if os.geteuid() == 0 else None


def verify(*, project, commit: str) -> Result:
    """Verify ``commit`` of ``project`` as its ``verify`` block says; see the module docstring."""
    return next(runs(project=project, commit=commit))


def runs(*, project, commit: str) -> Iterator[Result]:
    """``commit`` verified as often as it is asked (``next``): the mirror fetched and the
    commit resolved, diffed and measured once, then each run in a fresh checkout of its
    own (a failing tree's second run, ``runner.judging``). Raises as ``verify`` does, at
    the run that meets the trouble."""
    box = sandbox()
    try:
        box.check()
        _check_reachable(git.root())
        path, how = git.mirror(project)
    except (git.GitError, SandboxUnavailable) as exc:
        raise RunnerUnavailable(str(exc)) from exc
    limit = settings.FACTORY_RUNNER_REPORT_MAX_BYTES
    try:
        sha = git.resolve(path, commit)
        base = git.merge_base(path, project.default_branch, sha)
        size = git.tree_size(path, sha, limit=settings.FACTORY_RUNNER_MAX_CHECKOUT_BYTES)
        diff, cut = git.diff(path, base, sha, limit=limit)
        change = git.change_id(path, base, sha, limit=limit)
    except git.UnknownCommit as exc:
        raise CommitNotFound(str(exc)) from exc
    except git.BadCommit as exc:
        raise CommitRefused(str(exc)) from exc
    except git.GitError as exc:
        raise RunnerUnavailable(str(exc)) from exc
    while True:
        _check_room(size)
        try:
            workspace = git.checkout(path, sha, owner=_owner())
        except git.BadCommit as exc:
            raise CommitRefused(str(exc)) from exc
        except git.GitError as exc:
            raise RunnerUnavailable(str(exc)) from exc
        result = Result(commit=sha, base=base, mirror=how, diff=diff, change_id=change)
        yield run_checked_out(box, project, workspace, result, cut=cut)


def changed(*, project, result: Result, among: set[str]) -> set[str]:
    """Which of the paths ``among`` the change ``result`` verified adds, edits or removes
    (from its merge base, in the project's mirror)."""
    try:
        return git.changed_paths(git.mirror_path(project), result.base, result.commit, among=among)
    except git.GitError as exc:
        raise RunnerUnavailable(str(exc)) from exc


def tree_of(*, project, result: Result) -> str:
    """The tree ``result``'s commit holds (what a flaky test is recorded at)."""
    try:
        return git.tree_of(git.mirror_path(project), result.commit)
    except git.GitError as exc:
        raise RunnerUnavailable(str(exc)) from exc


def run_checked_out(
    box, project, workspace: Path, result: Result, *, cut: bool = False, scope: str = "submission"
) -> Result:
    """Run the verify block in ``workspace`` (a ``mirror.checkout``) and fill in ``result``;
    the workspace is removed, however it ends. ``scope`` separates the caches of runs
    that may not share them (``runner.cache.key``)."""
    limit = settings.FACTORY_RUNNER_REPORT_MAX_BYTES
    if cut:
        # A cut diff could end on a file's boundary and parse: diff-scope would never see
        # the files past the cut.
        result.problems.append(
            f"the diff from the merge base is over {limit} bytes "
            "(FACTORY_RUNNER_REPORT_MAX_BYTES); it is cut there, so the files past the cut "
            "cannot be checked"
        )
    started = time.monotonic()
    try:
        _forget_committed_reports(project.verify, workspace / "src")
        with _cache(project, workspace / "src", scope) as (folder, said):
            result.log = said
            _run_steps(box, project.verify, workspace / "src", result, folder)
        if not result.problems or result.steps[-1]["name"] == "test":
            _read_reports(project.verify, workspace / "src", result)
    finally:
        git.remove(workspace)
    result.seconds = round(time.monotonic() - started, 3)
    metrics.runner_finished(passed=result.passed, seconds=result.seconds)
    return result


def verify_tree(*, project, path: Path, sha: str) -> Result:
    """Verify ``sha``, a commit already in the mirror at ``path`` (the lander's merged
    tree), as the project's ``verify`` block says: the same sandbox, limits and reports
    as ``verify``, without fetching or diffing. Raises as ``verify`` does."""
    box = sandbox()
    try:
        box.check()
        _check_reachable(git.root())
    except SandboxUnavailable as exc:
        raise RunnerUnavailable(str(exc)) from exc
    try:
        size = git.tree_size(path, sha, limit=settings.FACTORY_RUNNER_MAX_CHECKOUT_BYTES)
        _check_room(size)
        workspace = git.checkout(path, sha, owner=_owner())
    except git.BadCommit as exc:
        raise CommitRefused(str(exc)) from exc
    except git.GitError as exc:
        raise RunnerUnavailable(str(exc)) from exc
    # The lander's cache is its own: a submission's setup (any agent's code) never writes
    # what a landing verification reads.
    return run_checked_out(
        box, project, workspace, Result(commit=sha, base="", mirror="built"), scope="landing"
    )


def _check_room(size: int) -> None:
    """The workspaces' disk must hold the checkout; if it cannot, that is this machine's
    fault, not the commit's (which is within the size limit)."""
    disk = os.statvfs(git.root())
    free = disk.f_bavail * disk.f_frsize
    if free < size:
        raise RunnerUnavailable(
            f"FACTORY_RUNNER_ROOT ({git.root()}) has {free} bytes free; the checkout needs {size}"
        )


def _forget_committed_reports(block: dict, src: Path) -> None:
    """Remove report files the commit itself carries: a report counts only if this run's
    test command wrote it (a committed passing JUnit must not stand in for the tests)."""
    for kind in ("junit", "coverage"):
        relative = block.get(kind)
        if not relative:
            continue
        path = src / relative
        # Links are left alone: nothing is removed through one, and read_report refuses
        # a report that is one or lies behind one, saying so.
        if any(folder.is_symlink() for folder in [path, *path.parents] if src in folder.parents):
            continue
        if path.is_file():
            path.unlink()


def _check_reachable(root: Path) -> None:
    """The sandbox's user must pass through every folder above its workspace; if it cannot,
    that is this machine's fault, not the submission's: nothing can be measured."""
    owner = _owner()
    if owner is None:
        return
    for folder in (root, *root.resolve().parents):
        info = folder.stat()
        if info.st_uid != owner and not info.st_mode & stat.S_IXOTH:
            raise RunnerUnavailable(
                f"the sandbox's user ({owner}) cannot pass through {folder} on the way to "
                f"FACTORY_RUNNER_ROOT ({root}); chmod o+x it or choose another root"
            )


@contextmanager
def _cache(project, src: Path, scope: str):
    """``(folder, log line)``: the project's dependency cache for this checkout's lock
    files, held while the steps run; ``(None, b"")`` when there is no setup or no
    ``cache_keys``."""
    block = project.verify
    if not block["setup"] or not cache.patterns(block):
        yield None, b""
        return
    key = cache.key(block, src, scope=scope)
    with cache.use(project, key, owner=_owner()) as path:
        _check_reachable(path.parent)
        held = cache.size(path)
        said = f"[runner] cache {key[:12]} ({'reused, ' + _mb(held) if held else 'new'})\n"
        yield path, said.encode()


def _mb(size: int) -> str:
    return f"{size / 1024 / 1024:.1f} MB"


def _run_steps(box, block: dict, src: Path, result: Result, cache_folder: Path | None) -> None:
    log = io.BytesIO()
    log.write(result.log)
    deadline = time.monotonic() + block["timeout_seconds"]
    steps = [("setup", command, block["setup_network"]) for command in block["setup"]]
    steps.append(("test", block["test"], False))
    for number, (name, command, network) in enumerate(steps, 1):
        room = block["output_limit_bytes"] - log.tell()
        # Not rounded down: a 1 s budget would leave a whole-second step no time at all.
        left = deadline - time.monotonic()
        header = f"[runner] step {number} ({name}{', network' if network else ''}): {command}\n"
        log.write(header.encode())
        if left <= 0 or room <= 0:
            why = "no time left" if left <= 0 else "no room left in the log"
            result.problems.append(f"{name} step {number} did not start: {why}")
            result.steps.append({"name": name, "command": command, "outcome": why})
            break
        limits = Limits(
            seconds=left,
            memory_mb=block["memory_mb"],
            output_bytes=room,
            processes=settings.FACTORY_RUNNER_PROCESSES,
            file_size_mb=settings.FACTORY_RUNNER_FILE_SIZE_MB,
        )
        outcome = box.run(
            command,
            workspace=src,
            network=network,
            limits=limits,
            log=log,
            cache=cache_folder,
            cache_writable=name == "setup",
        )
        said = outcome.describe()
        log.write(f"\n[runner] step {number} {said} after {outcome.seconds:.1f} s\n".encode())
        result.steps.append(
            {
                "name": name,
                "command": command,
                "exit_code": outcome.exit_code,
                "seconds": round(outcome.seconds, 3),
                "stopped": outcome.stopped,
                "outcome": said,
            }
        )
        if not outcome.ok:
            result.problems.append(f"the {name} command {said}")
            if outcome.stopped == "output":
                result.problems[-1] += "; the log is cut there"
            break
    result.log = log.getvalue()


def _read_reports(block: dict, src: Path, result: Result) -> None:
    for kind in ("junit", "coverage"):
        relative = block.get(kind)
        if not relative:
            continue
        try:
            setattr(result, kind, read_report(src, relative))
        except ReportProblem as exc:
            result.problems.append(f"{'JUnit' if kind == 'junit' else 'coverage'} report: {exc}")


def read_report(src: Path, relative: str) -> bytes:
    """The bytes of a report the test wrote at ``relative`` inside ``src``.

    Refused: a path through a symbolic link (a repository may link anywhere on the
    runner's machine), anything but a regular file, and more than
    ``FACTORY_RUNNER_REPORT_MAX_BYTES``. The sandbox's processes are gone by now, so
    nothing can swap the file between the check and the read.
    """
    current = src
    for part in Path(relative).parts:
        current = current / part
        if current.is_symlink():
            raise ReportProblem(
                f"{relative} goes through a symbolic link; reports must be plain files"
            )
    try:
        handle = os.open(current, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ReportProblem(f"the test command wrote nothing at {relative}") from None
    except OSError as exc:
        raise ReportProblem(f"{relative} cannot be read ({exc.strerror})") from None
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            raise ReportProblem(f"{relative} is not a regular file")
        limit = settings.FACTORY_RUNNER_REPORT_MAX_BYTES
        if info.st_size > limit:
            raise ReportProblem(f"{relative} is {info.st_size} bytes; the limit is {limit}")
        with os.fdopen(handle, "rb", closefd=False) as stream:
            return stream.read(limit + 1)[:limit]
    finally:
        os.close(handle)
