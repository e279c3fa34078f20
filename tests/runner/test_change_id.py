"""What a change is, byte for byte (the id that decides whether an approval carries over),
and which commit a submission names (its full id, nothing that leads to it).

``runner.mirror.change_id`` must tell apart any two changes a reviewer would have to read
again (whitespace, line endings, bytes that are not UTF-8, binary files, a space in a file
name), and must not tell apart the same change rebased onto a target that moved
elsewhere. ``git patch-id --stable``, the rule before, ignored whitespace.
"""

import subprocess

import pytest

from runner import mirror
from tests.runner.conftest import GIT_ENV

LIMIT = 1024 * 1024

GUARD = b"""\
# Who may do what.
#
# A user may act when one of their roles allows it.


def allowed(user, roles):
    for role in roles:
        if role == "admin":
            return True
    return False
"""
MAKEFILE = b"build:\n\trm -rf /tmp/build\n"


class Repo:
    """A repository with ``main`` at a base commit; changes are branches off a commit."""

    def __init__(self, path):
        self.path = path
        self.git("init", "-q", "-b", "main")
        self.base = self.commit({"guard.py": GUARD, "Makefile": MAKEFILE, "notes.txt": b"a\n"})

    def git(self, *args: str, input: bytes | None = None) -> str:
        done = subprocess.run(
            ["git", *args], cwd=self.path, env=GIT_ENV, input=input, capture_output=True
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.decode().strip()

    def commit(self, files: dict, *, on: str | None = None) -> str:
        if on:
            self.git("checkout", "-q", "--detach", on)
        for name, content in files.items():
            target = self.path / name
            if content is None:
                target.unlink()
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        self.git("add", "-A")
        self.git("commit", "-q", "-m", "change")
        return self.git("rev-parse", "HEAD")

    def change_id(self, base: str, sha: str, limit: int = LIMIT) -> str:
        return mirror.change_id(self.path, base, sha, limit=limit)

    def text_diff(self, base: str, sha: str) -> bytes:
        """The runner's text diff as ``git patch-id`` reads it: without the index lines."""
        diff = mirror.diff(self.path, base, sha, limit=LIMIT)[0]
        return b"\n".join(line for line in diff.split(b"\n") if not line.startswith(b"index "))


@pytest.fixture
def repo(tmp_path):
    (tmp_path / "r").mkdir()
    return Repo(tmp_path / "r")


def change_of(repo, files):
    return repo.change_id(repo.base, repo.commit(files, on=repo.base))


def test_the_same_change_rebased_onto_a_target_that_moved_elsewhere_keeps_its_id(repo):
    change = {"guard.py": GUARD.replace(b'"admin"', b'"owner"')}
    first = repo.commit(change, on=repo.base)
    # Someone lands above the hunk's context in the same file (moving its line numbers), and
    # in another file.
    moved = repo.commit({"guard.py": b"import os\n\n\n" + GUARD, "notes.txt": b"b\n"}, on=repo.base)
    rebased = repo.commit(
        {"guard.py": b"import os\n\n\n" + GUARD.replace(b'"admin"', b'"owner"')}, on=moved
    )

    assert repo.change_id(moved, rebased) == repo.change_id(repo.base, first) != ""


@pytest.mark.parametrize(
    "approved, resubmitted",
    [
        pytest.param(
            {"Makefile": b"build:\n\trm -rf /tmp/build/out\n"},
            {"Makefile": b"build:\n\trm -rf / tmp/build/out\n"},
            id="a space inside a command",
        ),
        pytest.param(
            {"notes.txt": b"a\nb\n"},
            {"notes.txt": b"a\nb\r\n"},
            id="a line ending",
        ),
        pytest.param(
            {"Makefile": b"build:\n\trm -rf /tmp/build\ntest:\n\tpytest\n"},
            {"Makefile": b"build:\n\trm -rf /tmp/build\ntest:\n        pytest\n"},
            id="a tab in a recipe turned to spaces",
        ),
        pytest.param(
            {"tools/run.sh": b"echo hi\n"},
            {"tools/run .sh": b"echo hi\n"},
            id="a space in a file name",
        ),
    ],
)
def test_whitespace_makes_another_change(repo, approved, resubmitted):
    assert change_of(repo, approved) != change_of(repo, resubmitted)


def test_a_return_moved_into_a_loop_is_another_change(repo):
    approved = GUARD.replace(b'"admin"', b'"owner"')
    indented = approved.replace(b"    return False\n", b"        return True\n")

    assert change_of(repo, {"guard.py": approved}) != change_of(repo, {"guard.py": indented})


def test_bytes_that_are_not_utf8_count_though_the_text_diff_shows_them_alike(repo):
    one = repo.commit({"notes.txt": b"a\xff\n"}, on=repo.base)
    other = repo.commit({"notes.txt": b"a\xfe\n"}, on=repo.base)

    assert repo.text_diff(repo.base, one) == repo.text_diff(repo.base, other)
    assert repo.change_id(repo.base, one) != repo.change_id(repo.base, other)


def test_binary_files_count_though_the_text_diff_says_only_that_they_differ(repo):
    one = repo.commit({"logo.png": b"\x89PNG\0one"}, on=repo.base)
    other = repo.commit({"logo.png": b"\x89PNG\0two"}, on=repo.base)

    assert b"Binary files" in repo.text_diff(repo.base, one)
    assert repo.text_diff(repo.base, one) == repo.text_diff(repo.base, other)
    assert repo.change_id(repo.base, one) != repo.change_id(repo.base, other)


def test_a_diff_over_the_limit_or_empty_has_no_id(repo):
    sha = repo.commit({"notes.txt": b"x" * 5000 + b"\n"}, on=repo.base)

    assert repo.change_id(repo.base, sha, limit=1000) == ""
    assert repo.change_id(repo.base, repo.base) == ""


def test_only_the_full_id_of_a_commit_object_names_a_commit(repo):
    sha = repo.commit({"notes.txt": b"b\n"}, on=repo.base)
    repo.git("tag", "-a", "-m", "a tag", "v1", sha)
    tag = repo.git("rev-parse", "v1")
    repo.git("branch", sha[:10], repo.base)  # a branch named like the commit's short id

    assert mirror.resolve(repo.path, sha.upper()) == sha
    for name in (sha[:10], sha[:39], tag, "v1", "main"):
        with pytest.raises(mirror.BadCommit):
            mirror.resolve(repo.path, name)
    with pytest.raises(mirror.UnknownCommit):
        mirror.resolve(repo.path, "0" * 40)
