"""A person's push to a task's pull request (docs/code-hosts.md, "A person's push").

When the pull request's head is a commit no attempt of the task names and the site did
not put there, ``pull_request_pushed`` asks the host who pushed it (the repository's
activity, never a payload's word) and, if that account is a member here
(``identities.user_for``), makes the push the task's next attempt in that member's name
(``tasks.attempts.attempt_from_push``): the runner verifies it and a reviewer judges it,
shown the interdiff against what was approved, before it can land. A push the site cannot
take (someone unknown here, an agent holding the task, a task already finished) is said on
the pull request once, and nothing on the site changes; one the host's record names nobody
for (yet) is left for the pull request's next delivery; while a batch lands the task's
approved change the delivery waits (``PushWaits``) and the sweep reads it again.
"""

from codehosts.identities import user_for
from codehosts.models import TaskPullRequest
from codehosts.providers import HostError
from projects.errors import Conflict
from tasks.attempts import attempt_from_push
from tasks.landing import heads_noted
from tasks.models import Attempt, Task, TaskState

# How many pushes' outcomes a task's link remembers (the newest), so one said on the pull
# request is not said again when its delivery comes twice.
PUSHES_KEPT = 20


class PushWaits(HostError):
    """Not the host's error: the push cannot be taken while a batch lands the task's
    approved change. Raised as a ``HostError`` so the delivery stays unprocessed and the
    sweep (``codehosts.sync.hosts_reconcile``) reads it again once the batch has ended."""


def pull_request_pushed(*, task: Task, pull, host, by_the_lander: bool = False) -> tuple[str, bool]:
    """Take the head of ``task``'s open pull request ``pull`` (as the host answered it now)
    as a person's attempt if it is a new push; return what was done (empty when the head
    is nothing new: an attempt's commit, or one the site's lander put there) and whether
    an attempt was made. Called by every sync of the pull request
    (``codehosts.pulls.pull_request_sync``): a delivery's, a job's after the task changed,
    the sweep's."""
    if not _new_head(task, pull):
        return "", False
    link = TaskPullRequest.objects.filter(task=task, number=pull.number).first()
    if link is None:
        return "", False
    said = (link.posted.get("pushes") or {}).get(pull.head_sha)
    if said:
        return f"{task.key}: the push of {pull.head_sha[:12]} was answered already: {said}", False
    account = host.pushed_by(pull.head_ref, pull.head_sha)
    if account is not None and account.login == pull.author:
        return "", False  # the site's own account (its lander updating the branch)
    member = user_for(task.project, host_id=account.id) if account is not None else None
    named = f"@{account.login}" if account is not None else "someone"
    holder = task.current_attempt.agent_id if task.current_attempt_id else None
    if task.state == TaskState.CLAIMED and (member is None or member.pk == holder):
        # Most likely the holding agent pushing before it submits (under an account linked
        # to it, or none): its submission names the commit it means; nothing to say.
        return f"{task.key}: {named} pushed {pull.head_sha[:12]} while an agent holds it", False
    if account is None:
        # Not in the host's record yet (it may lag the delivery), or a deleted account:
        # nothing remembered or said, so the pull request's next delivery reads it again.
        return (
            f"{task.key}: the host's record of pushes names nobody for {pull.head_sha[:12]} "
            "yet; not taken"
        ), False
    if member is None:
        why = (
            f"{named} is not a member of project {task.project.slug} on Factory Memory "
            "(a manager links a GitHub account to a member), so the push is not an attempt"
        )
        return _not_taken(task, link, pull, host, why), False
    pusher = f"{named} ({member.get_username()} here)"
    try:
        attempt = attempt_from_push(
            task=task,
            person=member,
            change={"commit": pull.head_sha, "branch": pull.head_ref},
            pusher=pusher,
            by_the_lander=by_the_lander,
        )
    except Conflict as exc:
        if exc.code == "landing_in_progress":
            raise PushWaits(f"{exc.detail}; the push is read again once it ends") from exc
        why = f"{exc.detail}: the push is not an attempt"
        return _not_taken(task, link, pull, host, why), False
    _remember(link, pull.head_sha, f"attempt {attempt.number}")
    return f"{task.key}: {pusher} pushed {pull.head_sha[:12]}: attempt {attempt.number}", True


def _new_head(task: Task, pull) -> bool:
    """Whether ``pull``'s head is a push to the branch of the task's newest attempt that
    names one, and neither an attempt's commit nor a head the lander put there."""
    changes = Attempt.objects.filter(task=task).order_by("-number").values_list("change", "landing")
    branch = None
    for change, landing in changes:
        change = change or {}
        if change.get("commit") == pull.head_sha or pull.head_sha in heads_noted(landing):
            return False
        branch = branch or change.get("branch")
    return branch is not None and pull.head_ref == branch


def _not_taken(task: Task, link: TaskPullRequest, pull, host, why: str) -> str:
    """Say once on the pull request why the push is not an attempt (remembered first, so a
    delivery read twice says it once: a post whose answer is lost is not said again)."""
    _remember(link, pull.head_sha, "not taken")
    host.comment(
        pull.number,
        f"Factory Memory did not take the push of {pull.head_sha[:12]} as an attempt of "
        f"{task.key}: {why}. The task's page on the site says where it stands.",
    )
    return f"{task.key}: the push of {pull.head_sha[:12]} was not taken: {why}"


def _remember(link: TaskPullRequest, sha: str, outcome: str) -> None:
    def merge(posted):
        pushes = {**(posted.get("pushes") or {}), sha: outcome}
        return {**posted, "pushes": dict(list(pushes.items())[-PUSHES_KEPT:])}

    link.record(merge)
