"""Git for the lander: build the target's tip plus approved changes, and push it forward.

Everything is done in the project's mirror (``runner.mirror``, fetched by ``fetch``: the
lander's git goes through this module alone), without a work tree:
``git merge-tree --write-tree`` merges two commits into a tree, ``git commit-tree`` makes
the commit. So building a batch writes objects and never touches a ref; only ``push``
moves anything, and only the remote's target branch, only forward, and only from the tip
the batch was built on (``--force-with-lease`` with that tip, on a commit that descends
from it: a compare-and-swap that can never rewind the branch).
"""

import re
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

from projects.verify import check_repository_location
from runner import mirror

# The lander reads trees and changed paths as the runner's gate does (runner.mirror).
from runner.mirror import GitError, changed_paths, git, stream, tree_of  # noqa: F401

# What a conflict's record keeps: enough for the next attempt to see the clash.
HUNK_LINES = 40
HUNKS_BYTES = 16 * 1024
TRAILER = re.compile(r"^Factory-Task: (\S+)$", re.MULTILINE)


@dataclass
class Applied:
    """A change built onto ``parent``: the new commit and its tree."""

    commit: str
    tree: str
    empty: bool = False  # the change was already on the target: the tree did not change


@dataclass
class Conflicted:
    """A change that does not apply onto the commit it was built on."""

    paths: list[str]
    hunks: list[dict] = field(default_factory=list)
    against: list[dict] = field(default_factory=list)  # who last changed each path

    def text(self) -> str:
        who = "; ".join(
            f"{item['path']} with {item['task'] or item['commit'][:12]}"
            + (f" (landed at {item['commit'][:12]})" if item["task"] else "")
            for item in self.against
        )
        return f"conflict in {who or ', '.join(self.paths)}"


def fetch(project) -> Path:
    """The project's mirror, fetched now (``runner.mirror``): where every step below works.
    Raises ``GitError`` when the repository cannot be read."""
    path, _ = mirror.mirror(project)
    return path


def tip(path: Path, branch: str) -> str | None:
    """The mirror's commit for ``branch``, or None when the branch does not exist."""
    try:
        return git(
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            f"refs/heads/{branch}^{{commit}}",
            cwd=path,
        ).strip()
    except GitError:
        return None


def resolve(path: Path, commit: str) -> str | None:
    """The approved ``commit`` if it is a commit object in the mirror, else None: a full
    id, never a name or a prefix, and never what a tag leads to (``runner.mirror.resolve``)."""
    try:
        return mirror.resolve(path, commit)
    except GitError:
        return None


def is_ancestor(path: Path, older: str, newer: str) -> bool:
    """Whether ``older`` is ``newer`` or in its history."""
    try:
        git("merge-base", "--is-ancestor", older, newer, cwd=path)
    except GitError as exc:
        if exc.returncode == 1:
            return False
        raise
    return True


def _identity() -> list[str]:
    name, email = settings.FACTORY_LANDING_COMMITTER
    return ["-c", f"user.name={name}", "-c", f"user.email={email}"]


def apply(
    path: Path, parent: str, change: str, *, message: str, method: str
) -> Applied | Conflicted:
    """Build ``change`` (an approved commit) onto ``parent``.

    ``squash``: one commit whose only parent is ``parent``; ``merge``: a merge commit of
    ``parent`` and ``change``. The three-way merge uses their merge base, so a change
    based on an older tip brings only its own edits. A conflict changes nothing.
    """
    out = bytearray()
    try:
        stream(
            "merge-tree",
            "--write-tree",
            "--name-only",
            "--no-messages",
            parent,
            change,
            sink=lambda piece: out.extend(piece) or True,
            cwd=path,
        )
        clean = True
    except GitError as exc:
        if exc.returncode != 1:
            raise
        clean = False
    lines = out.decode(errors="replace").split("\n")
    tree = lines[0].strip()
    if not clean:
        paths = [line for line in lines[1:] if line.strip()]
        return _conflict(path, parent, change, tree, paths)
    parents = ["-p", parent] + (["-p", change] if method == "merge" else [])
    commit = git(*_identity(), "commit-tree", tree, *parents, "-m", message, cwd=path).strip()
    return Applied(commit=commit, tree=tree, empty=tree == tree_of(path, parent))


def first_parent(path: Path, commit: str) -> str | None:
    """The first parent of ``commit`` (the target's tip it landed on), or None for a root."""
    line = git("rev-list", "--parents", "-n", "1", commit, "--", cwd=path).split()
    return line[1] if len(line) > 1 else None


def revert(path: Path, onto: str, landed: str, *, message: str) -> Applied | Conflicted:
    """Build the revert of ``landed`` (a commit the lander put on the target) onto ``onto``:
    what ``landed`` brought against its first parent is taken out, whatever landed after it
    kept, as ``git revert -m 1`` would. Without a work tree (git 2.39 has no
    ``merge-tree --merge-base``): a commit with its first parent's tree on top of ``landed``
    is merged onto ``onto`` (their merge base is ``landed``), as ``apply`` merges a change.
    A conflict changes nothing; ``empty``: the target no longer holds what it brought."""
    parent = first_parent(path, landed)
    if parent is None:
        raise GitError(f"{landed[:12]} is a root commit: there is nothing to revert it to")
    undo = git(
        *_identity(), "commit-tree", tree_of(path, parent), "-p", landed, "-m", "undo", cwd=path
    ).strip()
    return apply(path, onto, undo, message=message, method="squash")


def carries(path: Path, commit: str, key: str) -> bool:
    """Whether ``commit``'s message names task ``key`` in its ``Factory-Task`` trailer."""
    body = git("log", "-1", "--format=%B", commit, "--", cwd=path)
    return key in TRAILER.findall(body)


def revert_message(task, landed: str, *, by: str, reason: str) -> str:
    """The revert's message: what it reverts, the manager's reason, and the trailers that
    tie it to the landed commit and the task."""
    title = " ".join(task.title.split())
    why = " ".join(reason.split())
    return (
        f"Revert {task.key}: {title}\n\nThis reverts commit {landed}.\n\n{why}\n\n"
        f"Factory-Task: {task.key}\nFactory-Reverts: {landed}\nReverted-by: {by}\n"
    )


def _conflict(path: Path, parent: str, change: str, tree: str, paths: list[str]) -> Conflicted:
    paths = list(dict.fromkeys(paths))
    base = git("merge-base", parent, change, cwd=path).strip()
    hunks, room = [], HUNKS_BYTES
    for name in paths[:20]:
        for hunk in _marked_regions(path, tree, name):
            if room <= 0:
                break
            hunk = hunk[:room]
            room -= len(hunk)
            hunks.append({"path": name, "text": hunk})
    against = []
    for name in paths[:20]:
        line = git("log", "-1", "--format=%H%x00%B", f"{base}..{parent}", "--", name, cwd=path)
        commit, _, body = line.partition("\0")
        found = TRAILER.search(body)
        if commit.strip():
            against.append(
                {"path": name, "commit": commit.strip(), "task": found.group(1) if found else ""}
            )
    return Conflicted(paths=paths, hunks=hunks, against=against)


def _marked_regions(path: Path, tree: str, name: str) -> list[str]:
    """The conflict-marked regions git wrote into ``name`` in the merged ``tree``."""
    try:
        text = git("cat-file", "-p", f"{tree}:{name}", cwd=path)
    except GitError:
        return []  # deleted on one side, or not a file: the path says enough
    regions, current = [], None
    for line in text.splitlines():
        if line.startswith("<<<<<<< "):
            current = [line]
        elif current is not None:
            current.append(line)
            if line.startswith(">>>>>>> "):
                regions.append("\n".join(current[:HUNK_LINES]))
                current = None
    return regions


def message(task, attempt, *, reviewer: str, spec: str) -> str:
    """The landed commit's message: ``KEY: title`` and the trailers that tie it to the memory."""
    trailers = [
        f"Factory-Task: {task.key}",
        f"Factory-Attempt: {attempt.pk}",
        f"Reviewed-by: {reviewer}",
    ]
    if spec:
        trailers.append(f"Spec: {spec}")
    title = " ".join(task.title.split())
    return f"{task.key}: {title}\n\n" + "\n".join(trailers) + "\n"


def push(path: Path, url: str, commit: str, *, branch: str, expected: str) -> None:
    """Move ``branch`` of the repository at ``url`` from ``expected`` to ``commit``.

    ``commit`` descends from ``expected``, and the lease says the branch must still be at
    ``expected``: if anyone moved it meanwhile, the push is refused (``GitError``) and
    nothing changes. Never a forced rewind.
    """
    _push_with_lease(path, url, commit, branch=branch, expected=expected)


def force_branch(path: Path, url: str, commit: str, *, branch: str, expected: str) -> None:
    """Make ``branch`` of the repository at ``url`` exactly ``commit``, whatever it descends
    from, only if the branch is still at ``expected`` (a pull request's branch, set to the
    verified commit: ADR 0041). If anyone moved it meanwhile, the push is refused
    (``GitError``) and nothing changes. Never the target: only a task's own branch."""
    _push_with_lease(path, url, commit, branch=branch, expected=expected)


def message_of(path: Path, commit: str) -> str:
    """``commit``'s message as git keeps it."""
    return git("log", "-1", "--format=%B", commit, "--", cwd=path).strip()


def _push_with_lease(path: Path, url: str, commit: str, *, branch: str, expected: str) -> None:
    pins = check_repository_location(url)
    # Detached: a lander killed mid-push (its worker's process group) must not take the
    # receiving git of a local repository with it, which would leave its ref locks behind
    # and every later push refused (`HEAD.lock: File exists`). The push completes or fails
    # on its own, and the next lander settles the batch from git (ADR 0016).
    git(
        "push",
        "--porcelain",
        "--quiet",
        f"--force-with-lease=refs/heads/{branch}:{expected}",
        "--",
        url,
        f"{commit}:refs/heads/{branch}",
        cwd=path,
        config=pins,
        detached=True,
    )
