"""The push of a verified tree to the target branch, for every kind of batch (the lander's
changes, a manager's revert): a compare-and-swap on the base the tree was built on, never a
force push. The push either reached the target, or the target moved under it (the batch
is building again, to be built on the new tip), or it failed with the target still at the
base, or moved under ``FACTORY_LANDING_PUSH_TRIES`` pushes in a row: a ``LandingError``."""

from django.conf import settings

from landing import git
from landing.errors import LandingError
from landing.locks import ensure_held
from landing.models import Batch, BatchState
from landing.states import move
from projects.models import Project


class TargetMoved(Exception):
    """Someone moved the target under the push: build again on its new tip, in ``path``
    (the mirror fetched again)."""

    def __init__(self, path):
        super().__init__(path)
        self.path = path


def base_for(path, batch: Batch) -> str:
    """The target's tip, the batch's base from now on, for every kind of batch (the
    lander's changes, a manager's revert); a batch past ``building`` (the target moved
    under its push, or a change went back) builds again."""
    base = git.tip(path, batch.target)
    if base is None:
        raise LandingError(f"the repository has no branch {batch.target!r} to land on")
    if batch.state != BatchState.BUILDING:
        move(batch, "rebuild")
    batch.base = base
    batch.save(update_fields=["base"])
    return base


def push(project: Project, path, batch: Batch, head: str, base: str, *, refused: int) -> None:
    """Push ``head`` to the batch's target with a lease on ``base`` (the batch is
    ``pushing``). ``refused``: how many of this batch's pushes the target moved under
    before. Returns once the push reached the target. Raises ``TargetMoved`` (the batch
    moved back to ``building``) when someone else moved the target, keeping their work;
    ``LandingError`` when the push failed with the target still at ``base``, or when the
    target moved under this one too and that makes ``FACTORY_LANDING_PUSH_TRIES``;
    ``LockLost`` before pushing if the lander's lock was lost."""
    ensure_held(project.pk)  # a lander whose lock was lost meanwhile stops as a dead one
    try:
        git.push(path, project.repository_url, head, branch=batch.target, expected=base)
    except git.GitError as exc:
        path = git.fetch(project)
        if git.tip(path, batch.target) == base:
            raise LandingError(f"the push was refused: {exc}") from exc
        refused += 1
        if refused >= settings.FACTORY_LANDING_PUSH_TRIES:
            raise LandingError(f"the target moved under every one of {refused} pushes") from exc
        move(batch, "rebuild")
        raise TargetMoved(path) from exc
