"""What the stand-in holds in memory: one GitHub App with its installations and their
expiring tokens, personal tokens, and repositories (real bare git repositories) with their
protection, pull requests, check runs, commit statuses, issues, comments and reviews.

A test arranges the world through these objects directly (as the team, its CI or GitHub's
settings page would) and acts as Factory Memory only through HTTP.
"""

import itertools
import secrets
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import jwt

from tests.github_standin.git import Bare

WRITE, READ = "write", "read"
# Everything an installation of Factory Memory's App is given (docs/code-hosts.md).
ALL_PERMISSIONS = {
    "administration": READ,
    "checks": WRITE,
    "contents": WRITE,
    "issues": WRITE,
    "merge_queues": WRITE,
    "metadata": READ,
    "pull_requests": WRITE,
    "statuses": READ,
}


@dataclass
class Protection:
    """A branch's protection: the checks that must be green at a merge's head, whether the
    branch must be up to date (``strict``), approving reviews needed, the merge queue."""

    required_checks: list[str] = field(default_factory=list)
    strict: bool = False
    merge_queue: bool = False
    required_reviews: int = 0


@dataclass
class Review:
    login: str
    bot: bool
    state: str  # APPROVED, CHANGES_REQUESTED, COMMENTED
    commit: str


@dataclass
class ReviewComment:
    """A comment on lines of a pull request's diff: ``line`` the last, ``start_line`` the
    first of a range (None for one line), on ``side`` RIGHT (the head's lines) or LEFT."""

    id: int
    path: str
    line: int
    start_line: int | None
    side: str
    commit: str
    body: str
    user: str
    in_reply_to: int | None = None  # a reply in the thread of that comment
    created_at: str = "2026-01-01T00:00:00Z"


@dataclass
class Pull:
    number: int
    node_id: str
    head: str
    base: str
    title: str
    body: str | None
    draft: bool
    user: str
    state: str = "open"
    merged: bool = False
    merge_commit_sha: str | None = None
    closed_by: str | None = None  # who closed it (GitHub's issue answer says; not the pull's)
    closed_at: str | None = None
    queued: bool = False
    group: "Group | None" = None  # its merge group while queued (GitHub's merge queue)
    enqueued: int = 0  # the queue's order
    dequeued_because: str = ""  # why the merge queue last removed it
    merged_head: str | None = None  # the head commit it was merged at
    reviews: list[Review] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    review_comments: list[ReviewComment] = field(default_factory=list)


@dataclass
class Group:
    """The merge group GitHub's merge queue built for a queued pull request: its head
    commit merges the pull request's head (``pull_head``) onto ``base_sha`` (the target's
    tip, or the head of the group ahead), on the branch ``ref``
    (``gh-readonly-queue/<target>/pr-<number>-<head>``), where the required checks run."""

    base_sha: str
    head_sha: str
    pull_head: str
    ref: str


@dataclass
class Issue:
    number: int
    node_id: str
    title: str
    body: str | None
    labels: list[str]
    user: str
    state: str = "open"
    closed_by: str | None = None


@dataclass
class Check:
    id: int
    node_id: str
    name: str
    head_sha: str
    status: str
    conclusion: str | None
    app_id: int | None
    output: dict = field(default_factory=dict)
    annotations: list[dict] = field(default_factory=list)
    details_url: str | None = None


@dataclass
class Comment:
    id: int
    node_id: str
    issue: int
    body: str
    user: str


@dataclass
class Repo:
    id: int
    owner: str
    name: str
    git: Bare
    default_branch: str
    private: bool = True
    protection: dict[str, Protection] = field(default_factory=dict)
    pulls: dict[int, Pull] = field(default_factory=dict)
    issues: dict[int, Issue] = field(default_factory=dict)
    checks: dict[int, Check] = field(default_factory=dict)
    statuses: list[tuple[str, str, str]] = field(default_factory=list)  # sha, context, state
    comments: list[Comment] = field(default_factory=list)

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"

    def protect(self, branch: str, protection: Protection) -> None:
        self.protection[branch] = protection
        self.git.protect(sorted(self.protection))


@dataclass
class Installation:
    id: int
    account: str
    repositories: list[str]
    permissions: dict[str, str]


@dataclass
class Token:
    """An installation token (``installation``) or a person's token (``login``)."""

    value: str
    expires_at: datetime | None
    installation: Installation | None = None
    login: str | None = None
    scopes: str | None = None  # a classic token's X-OAuth-Scopes
    push: bool = True
    admin: bool = False


class World:
    """The stand-in's state; every change is made holding ``lock``."""

    def __init__(self, root: Path, app_id: int, public_keys: list[str], app_slug: str):
        self.root = root
        self.lock = threading.RLock()
        self.app_id = app_id
        self.app_slug = app_slug
        self.public_keys = list(public_keys)
        self.installations: dict[int, Installation] = {}
        self.tokens: dict[str, Token] = {}
        self.repos: dict[str, Repo] = {}
        # People with an account, by login in lower case: login → (id, login as spelled).
        self.people: dict[str, tuple[int, str]] = {}
        self.now = datetime.now(UTC).replace(microsecond=0)
        self._ids = itertools.count(1000)

    def next_id(self) -> int:
        return next(self._ids)

    # Arranging the world (what GitHub's settings pages and the team would do)

    def repository(self, full_name: str, default_branch: str = "main") -> Repo:
        owner, name = full_name.split("/")
        bare = Bare(self.root / f"{owner}+{name}.git", default_branch)
        repo = Repo(self.next_id(), owner, name, bare, default_branch)
        self.repos[full_name.lower()] = repo
        return repo

    def person(self, login: str) -> int:
        """Someone signs up as ``login`` (or already has): their account's number, which
        stays theirs when they rename the login."""
        with self.lock:
            if login.lower() not in self.people:
                self.people[login.lower()] = (self.next_id(), login)
            return self.people[login.lower()][0]

    def rename(self, login: str, new: str) -> None:
        """A person renames their login (GitHub's settings): the old name is free again."""
        with self.lock:
            number, _ = self.people.pop(login.lower())
            self.people[new.lower()] = (number, new)

    def install(self, account: str, repositories: list[str], permissions=None) -> Installation:
        installation = Installation(
            self.next_id(), account, repositories, dict(permissions or ALL_PERMISSIONS)
        )
        self.installations[installation.id] = installation
        return installation

    def personal_token(self, login: str, *, scopes="repo", push=True, admin=False) -> str:
        value = "ghp_" + secrets.token_hex(18)
        self.tokens[value] = Token(value, None, login=login, scopes=scopes, push=push, admin=admin)
        return value

    def mint(self, installation: Installation, lifetime=timedelta(hours=1)) -> Token:
        value = "ghs_" + secrets.token_hex(18)
        token = Token(value, self.now + lifetime, installation=installation)
        self.tokens[value] = token
        return token

    def expire_installation_tokens(self) -> int:
        """Every installation token expires now (as an hour passing would): how many."""
        with self.lock:
            live = [t for t in self.tokens.values() if t.installation and t.expires_at > self.now]
            for token in live:
                token.expires_at = self.now - timedelta(seconds=1)
            return len(live)

    # Reading credentials

    def app_from_jwt(self, encoded: str) -> bool:
        """Whether ``encoded`` is a JWT the App signed (RS256, with one of its public keys),
        issued by it, and not expired."""
        for key in self.public_keys:
            try:
                claims = jwt.decode(
                    encoded, key, algorithms=["RS256"], options={"require": ["iat", "exp", "iss"]}
                )
            except jwt.PyJWTError:
                continue
            return str(claims["iss"]) == str(self.app_id)
        return False

    def token(self, value: str) -> Token | None:
        token = self.tokens.get(value)
        if token is None or (token.expires_at is not None and token.expires_at <= self.now):
            return None
        return token

    def repo(self, owner: str, name: str) -> Repo | None:
        return self.repos.get(f"{owner}/{name}".lower())

    # What GitHub works out

    def check_green(self, repo: Repo, sha: str, context: str) -> str:
        """``success``, ``failure`` or ``expected`` for a required check at ``sha``: the
        latest check run of that name, else the latest commit status of that context."""
        runs = [c for c in repo.checks.values() if c.head_sha == sha and c.name == context]
        if runs:
            latest = max(runs, key=lambda c: c.id)
            if latest.status != "completed":
                return "expected"
            return (
                "success" if latest.conclusion in ("success", "neutral", "skipped") else "failure"
            )
        statuses = [s for s in repo.statuses if s[0] == sha and s[1] == context]
        if statuses:
            return "success" if statuses[-1][2] == "success" else "failure"
        return "expected"

    def diff_lines(self, repo: Repo, pull: Pull, commit: str) -> dict[str, dict[str, set]]:
        """The lines the pull request's diff shows at ``commit`` (from where it left the
        base, as GitHub's three-dot diff), by file and side: a review comment may name
        these, context lines included, and no other."""
        shown: dict[str, dict[str, set]] = {}
        path, old, new = "", 0, 0
        diff = repo.git.git("diff", "--no-color", "--no-renames", f"{pull.base}...{commit}")
        for text in diff.splitlines():
            if text.startswith("diff --git "):
                path, old, new = text.split(" b/", 1)[1], 0, 0
                shown[path] = {"LEFT": set(), "RIGHT": set()}
            elif text.startswith("@@ "):
                ranges = text.split(" ")
                old = int(ranges[1][1:].split(",")[0])
                new = int(ranges[2][1:].split(",")[0])
            elif text.startswith(("--- ", "+++ ", "\\")) or not path or not (old or new):
                continue
            elif text.startswith("-"):
                shown[path]["LEFT"].add(old)
                old += 1
            elif text.startswith("+"):
                shown[path]["RIGHT"].add(new)
                new += 1
            elif text.startswith(" "):
                shown[path]["LEFT"].add(old)
                shown[path]["RIGHT"].add(new)
                old, new = old + 1, new + 1
        return shown

    def merge_refusal(self, repo: Repo, pull: Pull, sha: str | None) -> tuple[int, str] | None:
        """Why GitHub would refuse to merge ``pull`` now, as (status, message), or None."""
        head = repo.git.head(pull.head)
        if pull.state != "open" or head is None:
            return 405, "Pull Request is not mergeable"
        if sha is not None and sha != head:
            return 409, "Head branch was modified. Review and try the merge again."
        protection = repo.protection.get(pull.base)
        if protection is None:
            return None
        if protection.merge_queue:
            return 405, "Changes must be made through the merge queue"
        approvals = {r.login for r in pull.reviews if r.state == "APPROVED" and not r.bot}
        if len(approvals) < protection.required_reviews:
            # An App's approval never counts toward required reviews, as on GitHub.
            return 405, (
                f"At least {protection.required_reviews} approving review is required by "
                "reviewers with write access."
            )
        for context in protection.required_checks:
            state = self.check_green(repo, head, context)
            if state != "success":
                return 405, f'Required status check "{context}" is {state}.'
        base = repo.git.head(pull.base)
        if protection.strict and base and not repo.git.contains(base, head):
            return 405, "Head branch is out of date. Review and try the merge again."
        return None

    def merge(self, repo: Repo, pull: Pull, method: str, title: str) -> str | None:
        """Merge ``pull`` into its base; the merge commit, or None when they conflict."""
        base = repo.git.head(pull.base)
        head = repo.git.head(pull.head)
        tree = repo.git.merge_tree(base, head)
        if tree is None:
            return None
        parents = [base, head] if method == "merge" else [base]
        sha = repo.git.commit_tree(tree, parents, title)
        repo.git.move(pull.base, sha, base)
        pull.state, pull.merged, pull.merge_commit_sha, pull.queued = "closed", True, sha, False
        pull.merged_head = head
        return sha

    def enqueue(self, repo: Repo, pull: Pull) -> None:
        """Into the merge queue of its base, last; its merge group is built at once."""
        if not pull.queued:
            pull.queued, pull.enqueued, pull.dequeued_because = True, self.next_id(), ""
        self.advance(repo)

    def dequeue(self, repo: Repo, pull: Pull, because: str) -> None:
        """Out of the merge queue, its merge group's branch deleted (those behind are
        built again on what is ahead of them at the next ``advance``)."""
        if pull.group is not None:
            repo.git.git("update-ref", "-d", f"refs/heads/{pull.group.ref}", check=False)
        pull.queued, pull.group, pull.dequeued_because = False, None, because

    def advance_all(self) -> None:
        for repo in list(self.repos.values()):
            self.advance(repo)

    def advance(self, repo: Repo) -> None:
        """What GitHub's merge queue does between two calls, for each queued target: build
        each queued pull request's merge group on the one ahead (again when what it stands
        on or the pull request's head changed; a head pushed to while queued leaves the
        queue, as on GitHub); merge the first group into the target once every required
        check is green on its head (the target fast-forwards to it), or remove it when one
        failed. Called after every request the stand-in answers."""
        with self.lock:
            for branch, protection in repo.protection.items():
                if protection.merge_queue:
                    while self._advance_one(repo, branch, protection):
                        pass

    def _advance_one(self, repo: Repo, branch: str, protection: Protection) -> bool:
        queued = sorted(
            (p for p in repo.pulls.values() if p.queued and p.base == branch),
            key=lambda p: p.enqueued,
        )
        base = repo.git.head(branch)
        for pull in queued:
            head = repo.git.head(pull.head)
            group = pull.group
            if group is not None and group.pull_head != head:
                self.dequeue(repo, pull, "the pull request's head changed while it was queued")
                return True
            if group is None or group.base_sha != base:
                if group is not None:
                    repo.git.git("update-ref", "-d", f"refs/heads/{group.ref}", check=False)
                tree = repo.git.merge_tree(base, head)
                if tree is None:
                    pull.group = None
                    self.dequeue(repo, pull, "the merge group could not be built: a conflict")
                    return True
                sha = repo.git.commit_tree(
                    tree, [base, head], f"Merge pull request #{pull.number} from {pull.head}"
                )
                ref = f"gh-readonly-queue/{branch}/pr-{pull.number}-{head}"
                repo.git.git("update-ref", f"refs/heads/{ref}", sha)
                pull.group = Group(base_sha=base, head_sha=sha, pull_head=head, ref=ref)
            base = pull.group.head_sha
        if not queued:
            return False
        first = queued[0]
        states = {
            c: self.check_green(repo, first.group.head_sha, c) for c in protection.required_checks
        }
        failed = [c for c, state in states.items() if state == "failure"]
        if failed:
            self.dequeue(repo, first, f"the required check {failed[0]} failed on its merge group")
            return True
        if all(state == "success" for state in states.values()):
            group = first.group
            repo.git.move(branch, group.head_sha, group.base_sha)
            repo.git.git("update-ref", "-d", f"refs/heads/{group.ref}", check=False)
            first.state, first.merged, first.merge_commit_sha = "closed", True, group.head_sha
            first.queued, first.group, first.merged_head = False, None, group.pull_head
            return True
        return False

    def close_pull(self, repo: Repo, number: int, login: str) -> Pull:
        """A person closes a pull request without merging it (GitHub's "Close pull request")."""
        with self.lock:
            pull = repo.pulls[number]
            pull.state, pull.closed_by = "closed", login
            pull.closed_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            return pull

    def reply(self, repo: Repo, number: int, to: int, body: str, login: str) -> ReviewComment:
        """A person replies in the thread of review comment ``to`` (GitHub's "Reply"): a
        review comment on the same lines, ``in_reply_to`` it."""
        with self.lock:
            pull = repo.pulls[number]
            parent = next(c for c in pull.review_comments if c.id == to)
            made = ReviewComment(
                self.next_id(), parent.path, parent.line, parent.start_line, parent.side,
                parent.commit, body, login, in_reply_to=to,
                created_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            )  # fmt: skip
            pull.review_comments.append(made)
            return made

    def reopen_pull(self, repo: Repo, number: int) -> Pull:
        with self.lock:
            pull = repo.pulls[number]
            pull.state, pull.closed_by, pull.closed_at = "open", None, None
            return pull

    def delete_branch(self, repo: Repo, branch: str, login: str) -> None:
        """A person deletes a branch: GitHub closes every open pull request from it, in
        their name."""
        with self.lock:
            repo.git.git("update-ref", "-d", f"refs/heads/{branch}")
            for pull in repo.pulls.values():
                if pull.head == branch and pull.state == "open":
                    self.close_pull(repo, pull.number, login)

    def update_branch(self, repo: Repo, pull: Pull) -> str | None:
        """Merge the base into the pull request's branch (GitHub's "Update branch")."""
        base = repo.git.head(pull.base)
        head = repo.git.head(pull.head)
        if repo.git.contains(base, head):
            return head
        tree = repo.git.merge_tree(head, base)
        if tree is None:
            return None
        sha = repo.git.commit_tree(
            tree, [head, base], f"Merge branch '{pull.base}' into {pull.head}"
        )
        repo.git.move(pull.head, sha, head)
        return sha

    def next_number(self, repo: Repo) -> int:
        return max([0, *repo.pulls, *repo.issues]) + 1
