"""Git for the runner: one mirror per project, fetched per verification, and workspaces.

``git clone --mirror`` happens once per project; every verification then fetches into
the mirror under an exclusive file lock, so concurrent runs of one project share it and
never clone twice. A commit is checked out of the mirror into a fresh workspace whose
objects are hard links to the mirror's; the sandbox never sees the mirror. git runs
with no user or system configuration, no terminal prompts and no ``ext::`` transport.
Every failure is a ``GitError`` carrying git's own message.
"""

import fcntl
import os
import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings

from projects.errors import Conflict
from projects.verify import check_repository_location

GIT_TIMEOUT = 600
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
    """git refused or failed; the message is git's own, trimmed."""


class UnknownCommit(GitError):
    """The repository was fetched, but the commit is not in it."""


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


def git(
    *args: str, cwd: Path | None = None, timeout: int = GIT_TIMEOUT, config: list[str] = ()
) -> str:
    """Run git (with ``config``, ``-c`` options, before the command); its output, or
    ``GitError`` with what git said."""
    argv = ["git", *PROTOCOLS, "-c", "core.hooksPath=/dev/null", *config, *args]
    try:
        done = subprocess.run(
            argv, cwd=cwd, env=_env(), capture_output=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise GitError(f"git {args[0]} took longer than {timeout} s") from None
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}"
        raise GitError(f"git {args[0]}: {message[-2000:]}")
    return done.stdout.decode(errors="replace")


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


def mirror(project) -> tuple[Path, str]:
    """The project's mirror, cloned the first time and fetched every time after.

    Returns the mirror's path and what was done ("cloned" or "fetched"). Where the
    repository leads is checked again first, and git connects only where the check
    looked (``projects.verify.check_repository_location``); a refusal is a ``GitError``.
    """
    path = _directory("mirrors") / f"{project.pk}.git"
    url = project.repository_url
    try:
        pins = check_repository_location(url)
    except Conflict as exc:
        raise GitError(f"the repository may not be fetched: {exc.detail}") from None
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
    """The full hash of ``commit`` in the mirror, or ``GitError`` saying it is not there."""
    try:
        return git(
            "rev-parse", "--verify", "--quiet", "--end-of-options", f"{commit}^{{commit}}", cwd=path
        ).strip()
    except GitError:
        raise UnknownCommit(
            f"commit {commit} is not in the repository (fetched just now); was it pushed?"
        ) from None


def checkout(path: Path, sha: str, *, owner: int | None) -> Path:
    """A fresh workspace holding ``sha``, owned by ``owner`` (the sandbox's user) if given.

    The workspace is a repository of its own, not a borrower of the mirror's objects
    (``objects/info/alternates``), so the sandbox needs no view of the mirror and never
    learns where the mirrors live. When the sandbox runs as a user of its own (a root
    worker) the object files are hard links to the mirror's, which stay the mirror
    owner's and read-only; otherwise the sandbox's user owns the mirror too, and the
    objects are copied, so nothing it does can reach the mirror.
    """
    workspace = Path(tempfile.mkdtemp(dir=_directory("workspaces"), prefix=f"{int(time.time())}-"))
    linked = "--local" if owner is not None else "--no-hardlinks"
    try:
        git("clone", "--quiet", linked, "--no-checkout", str(path), str(workspace / "src"))
        git(
            "-c",
            "advice.detachedHead=false",
            "checkout",
            "--quiet",
            "--detach",
            sha,
            cwd=workspace / "src",
        )
        if owner is not None:
            _give(workspace, owner)
    except Exception:
        remove(workspace)
        raise
    return workspace


def _give(workspace: Path, owner: int) -> None:
    """Make ``workspace`` ``owner``'s, except files hard-linked from the mirror: such a
    file is the mirror's own inode, and its owner stays. Links are not followed."""
    for folder, _, files in os.walk(workspace):
        os.lchown(folder, owner, owner)
        for name in files:
            entry = os.path.join(folder, name)
            if os.lstat(entry).st_nlink == 1:
                os.lchown(entry, owner, owner)


def diff(path: Path, branch: str, sha: str, *, limit: int) -> tuple[bytes, str]:
    """``git diff`` from the merge base of ``branch`` and ``sha`` to ``sha``, cut at ``limit``.

    Returns the diff and the merge base it starts from.
    """
    try:
        base = git("merge-base", "--end-of-options", f"refs/heads/{branch}", sha, cwd=path).strip()
    except GitError as exc:
        raise GitError(
            f"no merge base between the default branch {branch!r} and {sha[:12]}: {exc}"
        ) from None
    out = git(
        "diff",
        "--no-color",
        "--no-ext-diff",
        "--no-textconv",
        "--full-index",
        base,
        sha,
        cwd=path,
    ).encode()
    return out[:limit], base


def remove(workspace: Path) -> None:
    """Remove a workspace whatever its code did to its permissions."""

    def writable(function, name, excinfo):
        try:
            os.chmod(os.path.dirname(name), 0o700)
            os.chmod(name, 0o700)
        except OSError:
            pass
        function(name)

    if workspace.exists():
        shutil.rmtree(workspace, onerror=writable)


def sweep(older_than: float) -> int:
    """Remove workspaces left by runners that died (older than ``older_than`` seconds)."""
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
        if stamp < cutoff:
            remove(workspace)
            removed += 1
    return removed
