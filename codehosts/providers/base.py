"""The seam between Factory Memory and a code host (ADR 0030): what the rest of the site
may ask of a host, the host's answers as our own plain values, and the few errors a caller
decides on. Nothing here imports a host's client; ``codehosts.providers.github`` does.
"""

from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

MergeMethod = Literal["merge", "squash", "rebase"]
Conclusion = Literal[
    "success", "failure", "neutral", "cancelled", "skipped", "timed_out", "action_required"
]


class HostError(Exception):
    """A host refused or could not answer. ``detail`` is safe to show and to log: it never
    holds a credential (the providers build it from the host's message and the status)."""

    def __init__(self, detail: str, *, status: int | None = None):
        super().__init__(detail)
        self.detail = detail
        self.status = status


class NotFound(HostError):
    """The repository, pull request, issue or check run is not there, or the credentials
    do not reach it (GitHub says 404 for both)."""


class Forbidden(HostError):
    """The credentials lack a permission; ``missing`` names each, as the host spells it
    (``pull_requests: write``), when the host said which."""

    def __init__(self, detail: str, *, status: int | None = 403, missing: tuple[str, ...] = ()):
        super().__init__(detail, status=status)
        self.missing = missing


class Refused(HostError):
    """The host understood and refused: a merge whose checks are not green, a head that
    moved, a branch out of date. ``detail`` is the host's own message."""


class RateLimited(HostError):
    """The host asks the caller to wait ``retry_after`` seconds (longer than the provider
    waits itself); a job reschedules itself that far ahead."""

    def __init__(self, detail: str, *, status: int | None = 429, retry_after: float = 60.0):
        super().__init__(detail, status=status)
        self.retry_after = retry_after


class Unavailable(HostError):
    """The host answered 5xx, timed out or could not be reached, after the provider's own
    retries (idempotent calls only): the outcome of a write is unknown, so the caller
    re-reads before it tries again."""


class Unconfigured(HostError):
    """The project's code host names credentials this process does not hold."""


@dataclass(frozen=True)
class Repository:
    full_name: str
    default_branch: str
    node_id: str
    private: bool


@dataclass(frozen=True)
class Protection:
    """What a target branch demands before a merge: the checks that must be green at the
    head, whether the head must contain the target's tip (``strict``), approving reviews
    (which an App's approval never counts toward), and whether a merge queue merges it."""

    branch: str
    protected: bool
    required_checks: tuple[str, ...] = ()
    strict: bool = False
    required_reviews: int = 0
    merge_queue: bool = False


@dataclass(frozen=True)
class PullRequest:
    number: int
    node_id: str
    url: str
    state: str  # open | closed
    merged: bool
    draft: bool
    title: str
    body: str
    head_ref: str
    head_sha: str
    base_ref: str
    base_sha: str
    author: str
    merge_commit_sha: str | None = None
    closed_at: str | None = None  # as the host wrote it (ISO 8601), when closed


@dataclass(frozen=True)
class Annotation:
    path: str
    start_line: int
    end_line: int
    level: Literal["notice", "warning", "failure"]
    message: str
    title: str = ""


@dataclass(frozen=True)
class CheckRun:
    id: int
    name: str
    head_sha: str
    status: str
    conclusion: str | None
    url: str


@dataclass(frozen=True)
class Comment:
    id: int
    url: str


@dataclass(frozen=True)
class Issue:
    number: int
    title: str
    body: str
    state: str
    labels: tuple[str, ...]
    author: str
    url: str
    # GitHub's issues API answers a pull request's number too; such an issue is no task's.
    pull_request: bool = False
    # Who closed it, as the host says (GitHub's issue answer; a pull request's does not say):
    # the login, and the account's number, which a rename keeps (``HostUser.id``).
    closed_by: str = ""
    closed_by_id: int | None = None


@dataclass(frozen=True)
class HostUser:
    """A person's (or a bot's) account on the host: ``id`` is the host's number for it, which
    stays when the login is renamed; ``login`` is its name as the host said it now."""

    id: int
    login: str


@dataclass(frozen=True)
class ReviewComment:
    """A comment on a pull request's lines as the host shows it now: ``in_reply_to`` the
    comment whose thread it answers (None: it starts one), its author's account."""

    id: int
    body: str
    author: HostUser
    url: str
    written_at: str  # as the host wrote it (ISO 8601)
    in_reply_to: int | None = None


@dataclass(frozen=True)
class Merged:
    sha: str
    message: str


@dataclass(frozen=True)
class QueueEntry:
    """A pull request's place in its target's merge queue: ``state`` as GitHub names it
    (``QUEUED``, ``AWAITING_CHECKS``…); ``head_sha`` and ``base_sha`` of the merge group
    built for it, once there is one."""

    id: str
    position: int
    state: str
    head_sha: str = ""
    base_sha: str = ""


@dataclass(frozen=True)
class Access:
    """What the credentials may do on the repository: ``missing`` names each permission
    the site needs and lacks (empty when all is there)."""

    missing: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)


@runtime_checkable
class CodeHost(Protocol):
    """One project's repository on its code host. Every call may raise a ``HostError``."""

    provider: str

    def check_access(self) -> Access: ...

    def repository(self) -> Repository: ...

    def protection(self, branch: str) -> Protection: ...

    def open_or_update_pull_request(
        self, *, task: str, head: str, base: str, title: str, body: str, draft: bool
    ) -> PullRequest: ...

    def open_pull_requests(self, *, task: str, head: str) -> list[PullRequest]:
        """The task's open pull requests from branch ``head`` (its marker in the body)."""
        ...

    def set_draft(self, pull: PullRequest, draft: bool) -> PullRequest: ...

    def pull_request(self, number: int) -> PullRequest: ...

    def check_run(
        self,
        *,
        name: str,
        head_sha: str,
        status: Literal["queued", "in_progress", "completed"],
        conclusion: Conclusion | None = None,
        title: str = "",
        summary: str = "",
        annotations: tuple[Annotation, ...] = (),
        details_url: str | None = None,
        check_run_id: int | None = None,
    ) -> CheckRun: ...

    def comment(self, number: int, body: str) -> Comment: ...

    def review_comment(
        self,
        number: int,
        *,
        body: str,
        commit: str,
        path: str,
        line: int,
        start_line: int | None = None,
        side: Literal["new", "old"] = "new",
    ) -> Comment:
        """A comment on lines ``start_line``..``line`` (one line when ``start_line`` is
        None) of ``path`` in the pull request's diff at ``commit``: ``new`` the changed
        file's lines, ``old`` the original's. ``Refused`` (422 on GitHub) when the diff
        at that commit does not show those lines."""
        ...

    def comment_marked(self, number: int, marker: str) -> tuple[str, Comment] | None:
        """The pull request's comment whose body holds ``marker``: ``("review", …)`` on its
        lines, ``("comment", …)`` a plain one; None when there is none. How a caller finds
        a comment whose post's answer was lost before it posts again."""
        ...

    def commit_checks(self, sha: str) -> dict[str, str]:
        """Every check run and commit status on ``sha`` by name: ``"pending"`` until it
        completes, then its conclusion in lower case (``success``, ``failure``,
        ``timed_out``…; a status's ``error`` too). Of several runs of one name, the
        latest counts."""
        ...

    def merge(
        self,
        pull: PullRequest,
        *,
        sha: str,
        method: MergeMethod = "merge",
        title: str = "",
        message: str = "",
    ) -> Merged:
        """Merge pinned to ``sha`` (``Refused`` if the head moved, a required check is not
        green or the branch is behind a strict target); ``title`` and ``message`` are the
        merge or squash commit's, the host's own when empty."""
        ...

    def update_branch(self, pull: PullRequest, *, expected_head_sha: str) -> None: ...

    def enqueue_pull_request(self, pull: PullRequest, *, expected_head_sha: str) -> QueueEntry: ...

    def dequeue_pull_request(self, pull: PullRequest) -> QueueEntry: ...

    def queue_entry(self, number: int) -> QueueEntry | None:
        """Pull request ``number``'s entry in its target's merge queue, None when it is not
        queued."""
        ...

    def issues_with_label(self, label: str, *, state: str = "open") -> list[Issue]: ...

    def issue(self, number: int) -> Issue: ...

    def close_issue(self, number: int, comment: str) -> Issue: ...

    def close_pull_request(self, number: int, comment: str) -> PullRequest: ...

    def user(self, login: str) -> HostUser: ...

    def pushed_by(self, branch: str, sha: str) -> HostUser | None:
        """The account that moved ``branch`` to ``sha``, as the host's record of pushes
        says; None when it names nobody or holds no such push."""
        ...

    def review_comments(self, number: int) -> list[ReviewComment]:
        """Every comment on pull request ``number``'s lines, replies included, oldest
        first, pages followed."""
        ...
