"""Undo: the steps of a batch that lands a manager's revert of a landed change
(docs/landing.md, "Undo"). The lander runs them (``landing.lander.land_revert``) as it
runs a batch of changes: build on the target as it is, verify in the sandbox, push with a
lease on the tip built on (or, landing through pull requests, have the host merge the
revert's own pull request: ``landing.through_host.land_revert``), record; a revert that
does not apply or fails comes back."""

from landing import git, pushing, through_host
from landing.errors import LandingError
from landing.models import Batch
from landing.states import move
from landing.verifying import Runs, verified_prefix
from projects.models import Project
from tasks.landing import attempt_revert_return, task_revert_land


def revert(project: Project, batch: Batch, change, path) -> None:
    """The steps of a revert's batch (``landing.lander.land_revert``): build ``git revert``
    of ``change.commit`` (the landed commit) on the target's tip, verify it there, push it
    with a lease on that tip (built again if someone moved it), and record it; or send the
    revert back with the reason. ``change``: the lander's ``Change`` of the attempt. Raises
    what the lander's batch catches (``LandingError``, ``GitError``…): the revert stays
    queued."""
    if not project.repository_url:
        raise LandingError("the project has no repository to land on (repository_url)")
    if path is None:
        path = git.fetch(project)
    task = change.attempt.task
    revert = change.attempt.landing.get("revert") or {}
    landed = git.resolve(path, change.commit)
    pushes_refused = 0
    while True:
        base = pushing.base_for(path, batch)
        why = _unrevertable(path, batch, change.attempt, landed, base)
        if why:
            _return_revert(change, "failed", f"not reverted: {why}", {"base": base})
            return
        built = git.revert(
            path,
            base,
            landed,
            message=git.revert_message(
                task, landed, by=revert.get("by") or "", reason=revert.get("reason", "")
            ),
        )
        if isinstance(built, git.Conflicted):
            _return_revert(
                change,
                "conflict",
                f"not reverted: the revert does not apply on {batch.target} at {base[:12]}: "
                f"{built.text()}; revert it by hand, or ask again once the target allows",
                {"paths": built.paths, "against": built.against, "base": base},
            )
            return
        if built.empty:
            _return_revert(
                change,
                "failed",
                f"not reverted: {batch.target} at {base[:12]} no longer holds what "
                f"{landed[:12]} brought; reverting it changes nothing",
                {"base": base},
            )
            return
        change.parent, change.built = base, built.commit
        move(batch, "verify", base=base)
        runs = Runs(project=project, path=path, batch=batch)
        good, _ = verified_prefix(runs, base, [change])
        if not good:
            result, failing = runs.at[1], runs.failing[1]
            _return_revert(
                change,
                "failed",
                f"not reverted: the revert fails on {batch.target} at {base[:12]}: "
                f"{'; '.join(result.problems)}"
                + (f"; failing: {', '.join(failing)}" if failing else ""),
                {"failing": failing, "base": base},
            )
            return
        through = project.lands_through_host
        move(
            batch,
            "push",
            result=change.built,
            tree=built.tree,
            plan=[
                {
                    "attempt": change.attempt.pk,
                    "built": change.built,
                    **({"pull": True} if through else {}),
                }
            ],
        )
        commit = change.built
        try:
            if through:
                commit = through_host.land_revert(
                    project, path, batch, change, change.built, base, refused=pushes_refused
                )
            else:
                pushing.push(project, path, batch, change.built, base, refused=pushes_refused)
        except pushing.TargetMoved as moved:
            path = moved.path
            pushes_refused += 1
            continue
        except through_host.GoesBack as back:
            _return_revert(change, "failed", back.reason, {**back.details, "base": base})
            move(batch, "back", why=back.reason)
            return
        task_revert_land(attempt=change.attempt, commit=commit, batch=batch.pk)
        change.outcome = "reverted"
        move(batch, "reach")
        if through:
            through_host.check_merged_tree(project, batch, commit)
        return


def _unrevertable(path, batch: Batch, attempt, landed: str | None, base: str) -> str:
    """Why the landed commit cannot be reverted on ``base`` (empty: it can): it must be on
    the target and carry this task (a change already on the target when it landed landed
    as someone else's commit, which a revert must not take out)."""
    task = attempt.task
    if landed is None:
        return f"its landed commit {task.landed_commit[:12]} is not in the repository"
    if not git.is_ancestor(path, landed, base):
        return f"its landed commit {landed[:12]} is not on {batch.target} at {base[:12]}"
    if not git.carries(path, landed, task.key) and not _merged_by_the_host(attempt):
        return (
            f"the commit it landed at, {landed[:12]}, does not carry {task.key} (its change "
            "was already on the target when it landed); revert it by hand"
        )
    if git.first_parent(path, landed) is None:
        return f"{landed[:12]} is the repository's first commit"
    return ""


def _merged_by_the_host(attempt) -> bool:
    """Whether the attempt's change landed through its pull request, which the host merged
    as its landed commit: that commit is the change's own, though its message is the
    host's (GitHub's merge queue writes its own, with no ``Factory-Task`` trailer)."""
    number = (attempt.landing or {}).get("batch")
    batch = Batch.objects.filter(pk=number).first() if number else None
    return batch is not None and batch.through_host


def _return_revert(change, state: str, reason: str, details: dict) -> None:
    change.outcome, change.reason = state, reason
    attempt_revert_return(attempt=change.attempt, reason=reason, details=details)
