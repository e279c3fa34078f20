"""Fixtures for the runner's tests: a runner root per test and real git repositories."""

import os
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from projects.verify import clean_verify

# A user of these tests' own, not the default 65534: other suites' sandboxes running on this
# machine at the same time must neither look like leftovers nor share a fork bomb's
# process limit.
SANDBOX_UID = 65533
GIT_ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "HOME": "/nonexistent",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "Tester",
    "GIT_AUTHOR_EMAIL": "tester@example.com",
    "GIT_COMMITTER_NAME": "Tester",
    "GIT_COMMITTER_EMAIL": "tester@example.com",
}
LIMITS = {"timeout_seconds": 5, "memory_mb": 256, "output_limit_bytes": 64 * 1024}


@pytest.fixture(autouse=True)
def _bwrap():
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed on this machine")


@pytest.fixture
def runner_root(settings, tmp_path) -> Path:
    """This test's own FACTORY_RUNNER_ROOT, which the sandbox's user may pass through."""
    # pytest makes its base temporary directory private (0700); the sandbox's user must
    # reach the workspace and the mirror below it, as in a deployment.
    for folder in (tmp_path, *tmp_path.parents):
        if folder == Path("/tmp"):
            break
        folder.chmod(folder.stat().st_mode | 0o711)
    settings.FACTORY_RUNNER_ROOT = tmp_path / "runner"
    settings.FACTORY_RUNNER_UID = SANDBOX_UID
    return tmp_path / "runner"


class Repository:
    """A real git repository: a base commit on main, then commits on a branch."""

    def __init__(self, path: Path):
        self.path = path
        self.url = f"file://{path}"
        path.mkdir()
        self.git("init", "-q", "-b", "main")
        (path / "README.md").write_text("base\n")
        self.git("add", "-A")
        self.git("commit", "-q", "-m", "base")
        self.git("checkout", "-q", "-b", "hostile")

    def git(self, *args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=self.path, env=GIT_ENV, capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    def commit(self, files: dict, symlinks: dict | None = None) -> str:
        """Commit ``files`` (name: text) and ``symlinks`` (name: target); the commit's hash."""
        for name, text in files.items():
            (self.path / name).parent.mkdir(parents=True, exist_ok=True)
            (self.path / name).write_text(text)
        for name, target in (symlinks or {}).items():
            (self.path / name).parent.mkdir(parents=True, exist_ok=True)
            (self.path / name).symlink_to(target)
        self.git("add", "-A")
        self.git("commit", "-q", "-m", "hostile")
        return self.git("rev-parse", "HEAD")


def project_for(url: str, **verify) -> SimpleNamespace:
    """What ``verify`` needs of a project, with small limits and the test in ``test.py``."""
    block = {"test": "python3 test.py", "junit": "reports/junit.xml", **LIMITS, **verify}
    return SimpleNamespace(
        pk=1, repository_url=url, default_branch="main", verify=clean_verify(block)
    )


@pytest.fixture
def repository(tmp_path, runner_root) -> Repository:
    return Repository(tmp_path / "repo")


@pytest.fixture
def hostile(repository):
    """``hostile(files, symlinks=None, **verify)``: the project and the hash of a commit of
    ``files`` on a branch of a fresh repository."""

    def make(files: dict, *, symlinks: dict | None = None, **verify):
        sha = repository.commit(files, symlinks)
        return project_for(repository.url, **verify), sha

    return make


def git_in(path: Path, *args: str, input: bytes | None = None) -> str:
    """Run git in the repository at ``path`` (as the tests' author); its output."""
    done = subprocess.run(
        ["git", *args], cwd=path, env=GIT_ENV, input=input, capture_output=True, check=True
    )
    return done.stdout.decode().strip()


def orphan_commit(path: Path, like: str, branch: str = "orphan") -> str:
    """A commit with ``like``'s tree and no parent (no merge base with anything), on ``branch``."""
    sha = git_in(path, "commit-tree", f"{like}^{{tree}}", "-m", "orphan")
    git_in(path, "update-ref", f"refs/heads/{branch}", sha)
    return sha


TEXT_LINES = b"".join(b"line %06d of a file too big to read whole\n" % n for n in range(1000))


def commit_files(path: Path, parent: str, files: dict, branch: str = "plumbed") -> str:
    """A child of ``parent`` adding ``files`` (path: bytes, or a size for that many bytes of
    text), on ``branch``; its hash.

    Streamed into ``git fast-import``: no file is written here, so names this file system
    refuses and files of any size cost nothing but git's own compression.
    """
    with subprocess.Popen(
        # The fastest compression: a big file costs the test little more than its hashing.
        ["git", "-c", "pack.compression=1", "fast-import", "--quiet"],
        cwd=path,
        env=GIT_ENV,
        stdin=subprocess.PIPE,
    ) as importer:
        write = importer.stdin.write
        write(f"commit refs/heads/{branch}\n".encode())
        write(b"committer Tester <tester@example.com> 0 +0000\ndata 7\nplumbed\n")
        write(f"from {parent}\n".encode())
        for name, content in files.items():
            size = content if isinstance(content, int) else len(content)
            write(f"M 100644 inline {name}\ndata {size}\n".encode())
            if isinstance(content, bytes):
                write(content)
            else:
                while content:
                    write(TEXT_LINES[:content])
                    content -= min(content, len(TEXT_LINES))
            write(b"\n")
        importer.stdin.close()
    assert importer.returncode == 0
    return git_in(path, "rev-parse", f"refs/heads/{branch}")
