"""The stand-in's repositories are real bare git repositories: a pull request's head is what
its branch holds, a merge writes a real commit, and a direct push to a protected branch is
refused by a pre-receive hook, as GitHub refuses it (GH006)."""

import os
import subprocess
import tempfile
from pathlib import Path

PROTECTED = "standin-protected"
HOOK = """#!/bin/sh
# The stand-in's branch protection: refs listed in $GIT_DIR/standin-protected take no push.
while read old new ref; do
  if grep -qxF "$ref" "$GIT_DIR/standin-protected" 2>/dev/null; then
    echo "error: GH006: Protected branch update failed for $ref." >&2
    exit 1
  fi
done
exit 0
"""
IDENTITY = {
    "GIT_AUTHOR_NAME": "Stand-in",
    "GIT_AUTHOR_EMAIL": "standin@standin.invalid",
    "GIT_COMMITTER_NAME": "Stand-in",
    "GIT_COMMITTER_EMAIL": "standin@standin.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}


class Bare:
    """One bare repository and the plumbing the stand-in needs on it."""

    def __init__(self, path: Path, default_branch: str):
        self.path = path
        subprocess.run(
            ["git", "init", "--quiet", "--bare", "-b", default_branch, str(path)], check=True
        )
        hook = path / "hooks" / "pre-receive"
        hook.write_text(HOOK)
        hook.chmod(0o755)
        self.protect([])
        # Every ref update logged with who made it: GitHub's repository activity is read
        # from these logs (``pushes``).
        self.git("config", "core.logAllRefUpdates", "always")

    def git(self, *args: str, stdin: bytes | None = None, check: bool = True, by: str = "") -> str:
        env = {**os.environ, **IDENTITY, "GIT_DIR": str(self.path)}
        if by:  # who a ref update's log names
            env |= {"GIT_COMMITTER_NAME": by, "GIT_COMMITTER_EMAIL": f"{by}@standin.invalid"}
        done = subprocess.run(
            ["git", *args], input=stdin, capture_output=True, env=env, check=False
        )
        if check and done.returncode:
            raise RuntimeError(f"git {args[0]}: {done.stderr.decode(errors='replace')}")
        return done.stdout.decode().strip()

    def protect(self, branches: list[str]) -> None:
        (self.path / PROTECTED).write_text("".join(f"refs/heads/{b}\n" for b in branches))

    def head(self, branch: str) -> str | None:
        found = self.git("rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", check=False)
        return found or None

    def commit(
        self, branch: str, files: dict[str, str], message: str, start: str = "", by: str = ""
    ) -> str:
        """A commit on ``branch`` (created from ``start``, a branch, if absent) that writes
        ``files`` over its parent's tree; the branch moves to it, as a push by the account
        ``by`` would (its login; empty: an account the stand-in does not name)."""
        parent = self.head(branch) or (self.head(start) if start else None)
        with tempfile.TemporaryDirectory() as scratch:
            index = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
            env = {**os.environ, **IDENTITY, "GIT_DIR": str(self.path), **index}
            if parent:
                subprocess.run(["git", "read-tree", parent], env=env, check=True)
            for name, text in files.items():
                blob = self.git("hash-object", "-w", "--stdin", stdin=text.encode())
                subprocess.run(
                    ["git", "update-index", "--add", "--cacheinfo", f"100644,{blob},{name}"],
                    env=env,
                    check=True,
                )
            tree = (
                subprocess.run(["git", "write-tree"], env=env, check=True, capture_output=True)
                .stdout.decode()
                .strip()
            )
        sha = self.git("commit-tree", tree, *(["-p", parent] if parent else []), "-m", message)
        # Only over the head it was built on, as a push is (a RuntimeError if it moved).
        was = [parent] if parent and parent == self.head(branch) else []
        self.git("update-ref", f"refs/heads/{branch}", sha, *was, by=by)
        return sha

    def branches(self) -> list[str]:
        return self.git("for-each-ref", "--format=%(refname:lstrip=2)", "refs/heads").split()

    def pushes(self, branch: str) -> list[tuple[str, str, str, int]]:
        """The updates of ``branch``, newest first: (before, after, who, when as a Unix
        time), ``who`` the login that pushed, empty for an account the stand-in does not
        name (its own merges, a push through the file system)."""
        log = self.path / "logs" / "refs" / "heads" / branch
        if not log.is_file():
            return []
        found = []
        for line in log.read_text().splitlines():
            head, _, _ = line.partition("\t")
            before, after, rest = head.split(" ", 2)
            name, _, stamp = rest.rpartition("> ")
            who = name.split(" <", 1)[0]
            found.append(
                (
                    before,
                    after,
                    "" if who == IDENTITY["GIT_COMMITTER_NAME"] else who,
                    int(stamp.split()[0]),
                )
            )
        return found[::-1]

    def contains(self, ancestor: str, descendant: str) -> bool:
        env = {**os.environ, "GIT_DIR": str(self.path)}
        return (
            subprocess.run(
                ["git", "merge-base", "--is-ancestor", ancestor, descendant], env=env
            ).returncode
            == 0
        )

    def merge_tree(self, base: str, head: str) -> str | None:
        """The tree of ``head`` merged into ``base``, or None when they conflict."""
        env = {**os.environ, **IDENTITY, "GIT_DIR": str(self.path)}
        done = subprocess.run(
            ["git", "merge-tree", "--write-tree", base, head], capture_output=True, env=env
        )
        return done.stdout.decode().split("\n")[0].strip() if done.returncode == 0 else None

    def commit_tree(self, tree: str, parents: list[str], message: str) -> str:
        args = [arg for parent in parents for arg in ("-p", parent)]
        return self.git("commit-tree", tree, *args, "-m", message)

    def move(self, branch: str, sha: str, expected: str) -> None:
        """Move ``branch`` to ``sha`` only if it still points at ``expected`` (as GitHub's
        own merge does: never over a commit it did not see)."""
        self.git("update-ref", f"refs/heads/{branch}", sha, expected)
