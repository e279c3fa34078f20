"""Git for the runner: one mirror per project, fetched per verification, and workspaces.

``git clone --mirror`` happens once per project; every verification then fetches into
the mirror under an exclusive file lock, so concurrent runs of one project share it and
never clone twice. A commit is checked out of the mirror into a fresh workspace whose
objects are hard links to the mirror's; the sandbox never sees the mirror. git runs
with no user or system configuration, no terminal prompts and no ``ext::`` transport.
Every failure is a ``GitError`` carrying git's own message; what is wrong with the
commit itself (rather than with this machine or the repository's address) is a
``BadCommit``. No git output is held whole: it is read a piece at a time and git is
stopped at a limit.
"""

import codecs
import contextlib
import fcntl
import hashlib
import logging
import os
import re
import selectors
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings

from evidence.parsers import without_offsets
from projects.errors import Conflict
from projects.verify import check_repository_location

logger = logging.getLogger(__name__)

GIT_TIMEOUT = 600
# What ``git()`` keeps of a command's output (hashes, names, a config value) and of its
# messages: a command that prints more is stopped, so no repository can fill the memory.
OUTPUT_LIMIT = 1024 * 1024
MESSAGE_KEPT = 2000
CHUNK = 64 * 1024
# A record of ``git ls-tree`` longer than this (a path of that many bytes) is refused
# rather than buffered.
RECORD_LIMIT = 64 * 1024
# A commit as a key: the full object id, SHA-1 or SHA-256, never a name or a prefix.
FULL_ID = re.compile(r"[0-9a-fA-F]{40}|[0-9a-fA-F]{64}")
# Only git's own transports; ext:: and other helpers would run commands on this machine.
PROTOCOLS = [
    "-c",
    "protocol.allow=never",
    *[
        item
        for name in ("file", "git", "http", "https", "ssh")
        for item in ("-c", f"protocol.{name}.allow=always")
    ],
]


class GitError(RuntimeError):
    """git refused or failed; the message is git's own, trimmed; ``returncode`` its exit code
    (None when it never finished)."""

    def __init__(self, message: str, returncode: int | None = None):
        super().__init__(message)
        self.returncode = returncode


class UnknownCommit(GitError):
    """The repository was fetched, but the commit is not in it."""


class BadCommit(GitError):
    """The commit is in the repository, but git cannot verify it as it stands (no history
    shared with the default branch, a tree this machine cannot or may not check out): the
    commit's fault, never the machine's."""


def _env() -> dict:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(root()),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "/bin/false",
        "SSH_ASKPASS": "/bin/false",
        "GIT_SSH_COMMAND": "ssh -o BatchMode=yes -o StrictHostKeyChecking=accept-new",
        "LANG": "C",
    }


def stream(
    *args: str,
    sink: Callable[[bytes], bool],
    cwd: Path | None = None,
    timeout: int = GIT_TIMEOUT,
    config: list[str] = (),
    detached: bool = False,
) -> bool:
    """Run git (with ``config``, ``-c`` options, before the command), handing its output
    to ``sink`` a piece at a time as it comes; ``detached``: in a session of its own, so
    that a signal to the caller's process group does not reach it.

    ``sink`` returns False to have git stopped there (killed: nothing more is read).
    Returns whether it was stopped so; raises ``GitError`` when git fails or outlives
    ``timeout`` (it is killed then too). Only the last ``MESSAGE_KEPT`` bytes of git's
    messages are kept.
    """
    argv = ["git", *PROTOCOLS, "-c", "core.hooksPath=/dev/null", *config, *args]
    process = subprocess.Popen(
        argv,
        cwd=cwd,
        env=_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=detached,
    )
    deadline = time.monotonic() + timeout
    command = _command(args)
    said, stopped = b"", False
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            selector.register(process.stderr, selectors.EVENT_READ)
            while selector.get_map() and not stopped:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise GitError(f"git {command} took longer than {timeout} s")
                for key, _ in selector.select(left):
                    # os.read, not the file's read: it returns what the pipe holds now.
                    piece = os.read(key.fd, CHUNK)
                    if not piece:
                        selector.unregister(key.fileobj)
                    elif key.fileobj is process.stderr:
                        said = (said + piece)[-MESSAGE_KEPT:]
                    elif not sink(piece):
                        stopped = True
                        break
        if stopped:
            return True
        try:
            code = process.wait(max(deadline - time.monotonic(), 0.001))
        except subprocess.TimeoutExpired:
            raise GitError(f"git {command} took longer than {timeout} s") from None
        if code != 0:
            message = said.decode(errors="replace").strip() or f"exit {code}"
            raise GitError(f"git {command}: {message}", code)
        return False
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        process.stdout.close()
        process.stderr.close()


def _command(args) -> str:
    """The git command ``args`` run, past any ``-c name=value``."""
    rest = list(args)
    while rest[:1] == ["-c"]:
        del rest[:2]
    return rest[0] if rest else "git"


def git(
    *args: str,
    cwd: Path | None = None,
    timeout: int = GIT_TIMEOUT,
    config: list[str] = (),
    detached: bool = False,
) -> str:
    """Run git (with ``config``, ``-c`` options, before the command); its output (at most ``OUTPUT_LIMIT`` bytes), or ``GitError`` with what git
    said. For commands whose output is short by nature: hashes, names, a setting."""
    out = bytearray()

    def keep(piece: bytes) -> bool:
        out.extend(piece)
        return len(out) <= OUTPUT_LIMIT

    if stream(*args, sink=keep, cwd=cwd, timeout=timeout, config=config, detached=detached):
        raise GitError(f"git {_command(args)} printed more than {OUTPUT_LIMIT} bytes; stopped")
    return out.decode(errors="replace")


def root() -> Path:
    path = Path(settings.FACTORY_RUNNER_ROOT)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _directory(name: str) -> Path:
    path = root() / name
    path.mkdir(exist_ok=True)
    # The sandbox's user must pass through to its workspace and the mirror, no more.
    path.chmod(0o711)
    return path


@contextmanager
def _locked(project_id: int):
    with open(_directory("mirrors") / f"{project_id}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def mirror_path(project) -> Path:
    """Where the project's mirror is (or will be, once ``mirror`` cloned it)."""
    return _directory("mirrors") / f"{project.pk}.git"


def mirror(project) -> tuple[Path, str]:
    """The project's mirror, cloned the first time and fetched every time after.

    Returns the mirror's path and what was done ("cloned" or "fetched"). Where the
    repository leads is checked again first, and git connects only where the check
    looked (``projects.verify.check_repository_location``); a refusal is a ``GitError``.
    """
    path = mirror_path(project)
    url = project.repository_url
    try:
        pins = check_repository_location(url)
    except Conflict as exc:
        raise GitError(exc.detail) from None  # it names the URL and why
    with _locked(project.pk):
        if not path.exists():
            scratch = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{project.pk}-"))
            try:
                git(
                    "clone",
                    "--mirror",
                    "--quiet",
                    "--",
                    url,
                    str(scratch / "m.git"),
                    config=pins,
                )
                (scratch / "m.git").rename(path)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            return path, "cloned"
        if git("config", "--get", "remote.origin.url", cwd=path).strip() != url:
            git("remote", "set-url", "origin", "--", url, cwd=path)
        git("fetch", "--prune", "--quiet", "origin", cwd=path, config=pins)
        return path, "fetched"


def resolve(path: Path, commit: str) -> str:
    """``commit``, a full object id, if it names a commit object in the mirror.

    ``UnknownCommit`` when it is not there; ``BadCommit`` when it names something else (a
    tag, a tree) or is not a full id: a short id or a name can come to mean another commit
    (``git rev-parse`` prefers a branch called ``c0ffee1234`` to the object), so only the
    object itself is taken, never what it leads to.
    """
    if not FULL_ID.fullmatch(commit or ""):
        raise BadCommit(
            f"{commit[:40]!r} is not a full commit id (40 hex digits, or 64 in a SHA-256 "
            "repository): a short id or a name can come to mean another commit"
        )
    try:
        found = git(
            "rev-parse", "--verify", "--quiet", "--end-of-options", f"{commit}^{{commit}}", cwd=path
        ).strip()
    except GitError:
        raise UnknownCommit(
            f"commit {commit} is not in the repository (fetched just now); was it pushed?"
        ) from None
    if found != commit.lower():
        raise BadCommit(
            f"{commit[:12]} is not a commit (it leads to commit {found[:12]}): name the commit itself"
        )
    return found


def merge_base(path: Path, branch: str, sha: str) -> str:
    """The merge base of the default branch ``branch`` and ``sha``.

    ``BadCommit`` when they share no history (an orphan commit); ``GitError`` when the
    repository has no such branch (the project's setting, not the commit, is wrong).
    """
    try:
        git(
            "rev-parse", "--verify", "--quiet", "--end-of-options", f"refs/heads/{branch}", cwd=path
        )
    except GitError:
        raise GitError(
            f"the repository has no default branch {branch!r} to diff against; "
            "check the project's default_branch"
        ) from None
    try:
        return git("merge-base", "--end-of-options", f"refs/heads/{branch}", sha, cwd=path).strip()
    except GitError as exc:
        # git merge-base exits 1, saying nothing, when there is no merge base at all.
        if exc.returncode == 1:
            raise BadCommit(
                f"commit {sha[:12]} shares no history with the default branch {branch!r} "
                "(no merge base): base the change on the default branch"
            ) from None
        raise BadCommit(f"commit {sha[:12]}: {exc}") from None


def _megabytes(size: int) -> str:
    return f"{size / 1_000_000:.1f} MB"


def _shown(name: bytes) -> str:
    text = name.decode(errors="replace")
    return text if len(text) <= 60 else f"{text[:60]}…"


def tree_size(path: Path, sha: str, *, limit: int) -> int:
    """The bytes a checkout of ``sha`` writes (every file's size), read without checking out.

    ``BadCommit`` when the tree is over ``limit`` bytes, or holds a file name or a path
    longer than the workspaces' file system allows (the checkout could not write it).
    ``git ls-tree`` is read a record at a time, so a tree of any size costs no memory.
    """
    folder = _directory("workspaces")
    name_max = os.pathconf(folder, "PC_NAME_MAX")
    # Room for the workspace's own name and "src/" below the workspaces folder.
    path_max = os.pathconf(folder, "PC_PATH_MAX") - len(os.fsencode(folder)) - 64
    total = 0
    pending = b""
    refused = []

    def read(piece: bytes) -> bool:
        nonlocal total, pending
        records = (pending + piece).split(b"\0")
        pending = records.pop()
        if len(pending) > RECORD_LIMIT:
            refused.append(f"the commit's tree has a path longer than {RECORD_LIMIT} bytes")
            return False
        for record in records:
            info, _, name = record.partition(b"\t")
            size = info.split()[-1]
            total += int(size) if size.isdigit() else 0  # a submodule ("-") writes nothing
            longest = max(name.split(b"/"), key=len)
            if len(longest) > name_max:
                refused.append(
                    f"the commit's tree has a file name of {len(longest)} bytes "
                    f"({_shown(longest)}), longer than the {name_max} this file system allows"
                )
            elif len(name) > path_max:
                refused.append(
                    f"the commit's tree has a path of {len(name)} bytes ({_shown(name)}), "
                    f"longer than the {path_max} the runner can check out"
                )
            if refused:
                return False
        return True

    try:
        stream("ls-tree", "-r", "-l", "-z", "--full-tree", sha, sink=read, cwd=path)
    except GitError as exc:
        raise BadCommit(f"the tree of commit {sha[:12]} cannot be read: {exc}") from None
    if refused:
        raise BadCommit(refused[0])
    if total > limit:
        raise BadCommit(
            f"the commit's tree is {_megabytes(total)}, over the limit of {_megabytes(limit)} "
            "(FACTORY_RUNNER_MAX_CHECKOUT_BYTES)"
        )
    return total


def tree_of(path: Path, commit: str) -> str:
    return git("rev-parse", "--verify", f"{commit}^{{tree}}", cwd=path).strip()


def changed_paths(path: Path, parent: str, commit: str, *, among: set[str]) -> set[str]:
    """Which of the paths ``among`` ``commit`` adds, edits or removes against ``parent``
    (asked of those paths alone: a change of any size answers in a few bytes)."""
    if not parent or parent == commit or not among:
        return set()
    out = git(
        "diff-tree",
        "-r",
        "-z",
        "--no-renames",
        "--name-only",
        parent,
        commit,
        "--",
        *(f":(literal){name}" for name in sorted(among)),
        cwd=path,
    )
    return {name for name in out.split("\0") if name}


def checkout(path: Path, sha: str, *, owner: int | None) -> Path:
    """A fresh workspace holding ``sha``, owned by ``owner`` (the sandbox's user) if given.

    The workspace is a repository of its own, not a borrower of the mirror's objects
    (``objects/info/alternates``), so the sandbox needs no view of the mirror and never
    learns where the mirrors live. When the sandbox runs as a user of its own (a root
    worker) the object files are hard links to the mirror's, which stay the mirror
    owner's and read-only; otherwise the sandbox's user owns the mirror too, and the
    objects are copied, so nothing it does can reach the mirror.

    ``BadCommit`` when git cannot check the commit out (a path git refuses to write);
    ``GitError`` when the workspace could not be made at all (this machine's trouble).
    Size the tree with ``tree_size`` first: the checkout itself writes what the tree holds.
    """
    workspace = Path(tempfile.mkdtemp(dir=_directory("workspaces"), prefix=f"{int(time.time())}-"))
    linked = "--local" if owner is not None else "--no-hardlinks"
    try:
        git("clone", "--quiet", linked, "--no-checkout", str(path), str(workspace / "src"))
        try:
            git(
                "-c",
                "advice.detachedHead=false",
                "checkout",
                "--quiet",
                "--detach",
                sha,
                cwd=workspace / "src",
            )
        except GitError as exc:
            raise BadCommit(f"commit {sha[:12]} cannot be checked out: {exc}") from None
        if owner is not None:
            _give(workspace, owner)
    except BaseException:
        remove(workspace)
        raise
    return workspace


def _give(workspace: Path, owner: int) -> None:
    """Make ``workspace`` ``owner``'s, except files hard-linked from the mirror: such a
    file is the mirror's own inode, and its owner stays. Links are not followed."""
    os.lchown(workspace, owner, owner)
    for folder, entry, info in entries(workspace):
        if stat.S_ISDIR(info.st_mode) or info.st_nlink == 1:
            os.chown(entry.name, owner, owner, dir_fd=folder, follow_symlinks=False)


def entries(top: Path) -> Iterator[tuple[int, os.DirEntry, os.stat_result]]:
    """``(folder, entry, its lstat)`` for everything below the folder ``top``, without
    following a link; ``folder`` is a descriptor of the entry's folder, valid until the
    next item.

    A repository's tree or a setup step's files may be of any depth, so the walk makes no
    assumption about it: one folder at a time by descriptor (each opened ``O_NOFOLLOW``
    from its parent's, one open at once, names kept for the rest), so a tree deeper than
    Python's recursion or past the longest path the kernel takes is walked whole
    (``os.walk`` raises RecursionError on the one and skips what lies past the other). A
    folder moved while it is walked ends the walk where it is. Nothing when ``top`` cannot
    be opened as a folder.
    """
    try:
        fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return
    # Each level: the folder's identity, then the names of its subfolders still to walk.
    levels: list[tuple[tuple[int, int], list[str]]] = [(_identity(fd), [])]
    entered = True
    try:
        while True:
            if entered:
                found = []
                with contextlib.suppress(OSError), os.scandir(fd) as listing:
                    for entry in listing:
                        with contextlib.suppress(OSError):
                            found.append((entry, entry.stat(follow_symlinks=False)))
                for entry, info in found:
                    yield fd, entry, info
                    if stat.S_ISDIR(info.st_mode):
                        levels[-1][1].append(entry.name)
            todo = levels[-1][1]
            if todo:
                try:
                    inner = os.open(
                        todo.pop(), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd
                    )
                except OSError:
                    entered = False
                    continue  # gone, or replaced by what is not a folder
                os.close(fd)
                fd, entered = inner, True
                levels.append((_identity(fd), []))
                continue
            levels.pop()
            if not levels:
                return
            # ".." of a folder entered without following links is the one it came from,
            # unless the folder was moved meanwhile: then stop.
            parent = os.open("..", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd, entered = parent, False
            if _identity(fd) != levels[-1][0]:
                return
    finally:
        os.close(fd)


def _identity(fd: int) -> tuple[int, int]:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


def _diff(path: Path, base: str, sha: str, sink: Callable[[bytes], bool], *options: str) -> bool:
    """``git diff`` of ``base`` to ``sha`` with no colour, no external or text-converting
    driver a repository may name, and full blob ids, streamed to ``sink`` (``stream``).
    ``BadCommit`` when git cannot diff the commit."""
    try:
        return stream(
            "diff",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "--full-index",
            *options,
            base,
            sha,
            sink=sink,
            cwd=path,
        )
    except GitError as exc:
        raise BadCommit(f"commit {sha[:12]} cannot be diffed: {exc}") from None


def change_id(path: Path, base: str, sha: str, *, limit: int) -> str:
    """What the change from ``base`` to ``sha`` is, byte for byte, up to line offsets: the
    SHA-256 of the raw bytes of ``git diff --binary`` with every hunk header reduced to
    its line counts and every index line's blob ids taken out
    (``evidence.parsers.without_offsets``). Empty when the diff is empty or over ``limit``
    bytes (nothing can then be compared).

    Two changes have the same id only when they add and remove the same bytes, in the same
    files, with the same context lines: whitespace, line endings, bytes that are not
    UTF-8 and binary files all count (``git patch-id`` ignores whitespace, and the text
    diff the runner shows says only "Binary files differ"). Where a hunk sits in its file
    does not: a clean rebase onto a target that moved elsewhere keeps its id.
    """
    digest = hashlib.sha256()
    pending = b""
    size = 0

    def take(piece: bytes) -> bool:
        nonlocal pending, size
        size += len(piece)
        if size > limit:
            return False
        lines = (pending + piece).split(b"\n")
        pending = lines.pop()
        for line in lines:
            digest.update(without_offsets(line) + b"\n")
        return True

    cut = _diff(path, base, sha, take, "--binary", "--no-renames")
    if cut or size == 0:
        return ""
    digest.update(without_offsets(pending))
    return digest.hexdigest()


def diff(path: Path, base: str, sha: str, *, limit: int) -> tuple[bytes, bool]:
    """``git diff`` from ``base`` to ``sha`` as UTF-8 (an invalid byte becomes U+FFFD), and
    whether it was cut at ``limit`` bytes.

    Read a piece at a time and git stopped at the limit, so a diff of any size costs at
    most ``limit`` bytes here. ``BadCommit`` when git cannot diff the commit.
    """
    out = bytearray()
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def keep(piece: bytes) -> bool:
        out.extend(decoder.decode(piece).encode())
        return len(out) <= limit

    cut = _diff(path, base, sha, keep)
    if not cut:
        out.extend(decoder.decode(b"", final=True).encode())
        cut = len(out) > limit
    del out[limit:]
    return bytes(out), cut


def remove(workspace: Path) -> bool:
    """Remove a workspace whatever its code did to it; whether it is gone. Never raises.

    No link is followed: every directory is entered by a descriptor opened with
    ``O_NOFOLLOW`` from its parent's, so a link inside the workspace is removed, never
    what it points to, and only directories inside the workspace have their mode
    changed (a ``000`` directory is given back to its owner to be emptied). Names are
    kept, not descriptors, so any depth costs one descriptor. What cannot be removed
    is logged and left for ``sweep``; a failed cleanup never decides a verdict.
    """
    try:
        fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return True
    except OSError as exc:
        logger.warning("workspace %s could not be opened to remove it: %s", workspace, exc)
        return False
    try:
        _empty(fd)
        os.close(fd)
        fd = -1
        os.rmdir(workspace)
        return True
    except OSError as exc:
        logger.warning("workspace %s could not be removed (swept later): %s", workspace, exc)
        return False
    finally:
        if fd >= 0:
            os.close(fd)


def _open_inside(name: str, parent: int) -> int:
    """The directory ``name`` of ``parent``, made readable and writable by its owner first.

    Opened ``O_PATH | O_NOFOLLOW`` (a link is not a directory here), its mode changed
    through that descriptor (``/proc/self/fd``: Linux has no ``fchmod`` for it), then
    opened for reading: the mode changed is the directory's, never a link's target's.
    """
    handle = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY, dir_fd=parent)
    try:
        if stat.S_IMODE(os.fstat(handle).st_mode) & 0o700 != 0o700:
            os.chmod(f"/proc/self/fd/{handle}", 0o700)
        return os.open(".", os.O_RDONLY | os.O_DIRECTORY, dir_fd=handle)
    finally:
        os.close(handle)


def _empty(top: int) -> None:
    """Remove everything below the directory ``top`` (a descriptor, left open)."""
    if stat.S_IMODE(os.fstat(top).st_mode) & 0o700 != 0o700:
        os.chmod(f"/proc/self/fd/{top}", 0o700)
    fd = os.dup(top)
    # Each level: its name in its parent and the subdirectories still to empty in it.
    levels: list[tuple[str, list[str]]] = [("", [])]
    entered = True
    try:
        while True:
            name, todo = levels[-1]
            if entered:
                with os.scandir(fd) as entries:
                    for entry in entries:
                        if entry.is_dir(follow_symlinks=False):
                            todo.append(entry.name)
                        else:
                            os.unlink(entry.name, dir_fd=fd)
            if todo:
                child = _open_inside(todo[-1], fd)
                os.close(fd)
                fd, entered = child, True
                levels.append((todo.pop(), []))
                continue
            if len(levels) == 1:
                return
            # ".." of a directory entered without following links is the one it came from.
            parent = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd, entered = parent, False
            levels.pop()
            os.rmdir(name, dir_fd=fd)
    finally:
        os.close(fd)


def sweep(older_than: float) -> int:
    """Remove workspaces left by runners that died (older than ``older_than`` seconds);
    how many are gone."""
    removed = 0
    folder = root() / "workspaces"
    if not folder.exists():
        return 0
    cutoff = time.time() - older_than
    for workspace in folder.iterdir():
        try:
            stamp = int(workspace.name.split("-", 1)[0])
        except ValueError:
            continue
        if stamp < cutoff and remove(workspace):
            removed += 1
    return removed
