"""GitHub (and GitHub Enterprise Server) behind the seam, through githubkit (ADR 0030).

githubkit signs an App's JWT, mints the installation token and renews it before it
expires; this module adds what a worker needs around it: explicit timeouts, retries of
reads only (a write whose answer was lost is re-read by its caller, never sent twice),
waits the host asks for up to a bound (longer ones are the caller's ``RateLimited``), a
token the host stopped taking (revoked, or expired early) dropped and minted again once,
the App's previous key tried while a key is rotated, and every failure mapped to the
seam's errors with a message that holds no credential.

Imported only when a project's code host is GitHub (``codehosts.providers.provider_for``):
githubkit and its models are large, and the web process never needs them to route a URL.
"""

import logging
import re
import time
from typing import Any

import httpx
from githubkit import AppAuthStrategy, AppInstallationAuthStrategy, GitHub, TokenAuthStrategy
from githubkit.exception import (
    AuthCredentialError,
    GitHubException,
    GraphQLFailed,
    RateLimitExceeded,
    RequestError,
    RequestFailed,
    RequestTimeout,
)

from codehosts.providers.base import (
    Access,
    Annotation,
    CheckRun,
    Comment,
    Forbidden,
    HostError,
    HostUser,
    Issue,
    Merged,
    NotFound,
    Protection,
    PullRequest,
    QueueEntry,
    RateLimited,
    Refused,
    Repository,
    ReviewComment,
    Unavailable,
    Unconfigured,
)
from codehosts.providers.github_calls import Retry, token_cache, unwrapped
from codehosts.providers.github_graphql import (
    DEQUEUE,
    DRAFT,
    ENQUEUE,
    ENTRY,
    READY,
    ROLLUP,
    STATUS_STATES,
)

logger = logging.getLogger(__name__)

# What an installation of the App needs (docs/code-hosts.md); merge_queues only where the
# target has a merge queue.
REQUIRED = {
    "administration": "read",
    "checks": "write",
    "contents": "write",
    "issues": "write",
    "metadata": "read",
    "pull_requests": "write",
    "statuses": "read",
}
LEVELS = {"read": 1, "write": 2, "admin": 3}
ANNOTATIONS_PER_REQUEST = 50  # GitHub's limit; the rest follow as updates of the run
# Reads are retried; a write whose answer was lost may have happened, so its caller
# re-reads first (a second pull request, merge or check run would be wrong).
# A diff's side as the seam names it, and as GitHub's review comments do.
SIDES = {"new": "RIGHT", "old": "LEFT"}
MARKER = "<!-- factory-memory:task {task} -->"
# GitHub refuses (422) a pull request body or a check run's summary longer than this.
MAX_TEXT = 65_536
CUT = "\n\n… (cut to GitHub's limit: the whole text is on the task's page)"


# A branch's activities read to find who pushed its head: the newest are enough, as the
# push that put the head there is the branch's latest.
PUSHES_READ = 30
PUSHES = ("push", "force_push", "branch_creation")


def fitted(text: str, limit: int = MAX_TEXT) -> str:
    """``text``, cut (saying so) to fit ``limit`` characters."""
    return text if len(text) <= limit else text[: limit - len(CUT)] + CUT


class GitHubHost:
    """A project's repository on GitHub, as a token or as an App's installation.

    One per job or request: it keeps which App key is in use and its client, and is not
    shared between threads (the installation token is, through ``token_cache``)."""

    provider = "github"

    def __init__(
        self,
        *,
        api_url: str,
        repository: str,
        token: str | None = None,
        app_id: int | None = None,
        installation_id: int | None = None,
        private_keys: tuple[str, ...] = (),
        timeout: float = 10.0,
        retries: int = 3,
        max_wait: float = 60.0,
        backoff: float = 1.0,
        sleep=time.sleep,
        page_size: int = 100,
        max_pages: int = 100,
    ):
        self.api_url = api_url.rstrip("/")
        self.repository_name = repository
        self.owner, self.name = repository.split("/")
        self.page_size, self.max_pages = page_size, max_pages
        self._token = token
        self._app_id, self._installation_id = app_id, installation_id
        self._keys = [key for key in private_keys if key]
        if not token and not self._keys:
            raise Unconfigured("the code host's credentials are not set in this process")
        self._key = 0
        self._secrets = [s for s in (token, *self._keys) if s]
        self._timeout = httpx.Timeout(timeout, connect=min(timeout, 5.0))
        self._retry = Retry(retries=retries, max_wait=max_wait, backoff=backoff, sleep=sleep)
        self._cache = token_cache(self.api_url)
        # One transport for the provider's life: githubkit opens a client per call, and
        # a client of its own would load the TLS trust store every time (~60 ms here).
        self._transport = httpx.HTTPTransport()
        self._github = self._client()

    def __repr__(self) -> str:
        return f"<GitHubHost {self.api_url} {self.repository_name}>"

    def _client(self, *, as_app: bool = False) -> GitHub:
        if self._token:
            auth: Any = TokenAuthStrategy(self._token)
        elif as_app:
            auth = AppAuthStrategy(self._app_id, self._keys[self._key])
        else:
            auth = AppInstallationAuthStrategy(
                self._app_id, self._keys[self._key], self._installation_id
            )
        return GitHub(
            auth,
            base_url=self.api_url + "/",
            timeout=self._timeout,
            auto_retry=self._retry,
            cache_strategy=self._cache,
            http_cache=False,
            user_agent="factory-memory",
            follow_redirects=False,
            transport=self._transport,
        )

    # Calling, and mapping what went wrong

    def _call(self, call, *, as_app: bool = False):
        """``call(github)``, renewing the installation token once if the host stopped
        taking it, and trying the App's previous key if the current one is refused."""
        for attempt in range(1 + len(self._keys)):
            github = self._client(as_app=True) if as_app else self._github
            try:
                try:
                    return call(github)
                except RequestError as wrapped:
                    raise unwrapped(wrapped) from None
            except RequestFailed as exc:
                if exc.response.status_code != 401 or self._token or attempt == len(self._keys):
                    raise self._mapped(exc) from None
                self._cache.forget_installation_tokens()
                if exc.request.url.path.endswith("/access_tokens") or as_app:
                    # The App's JWT was refused: while a key is rotated, try the other.
                    self._key = (self._key + 1) % len(self._keys)
                    self._cache._items.clear()
                self._github = self._client()
            except (GitHubException, ValueError, TypeError) as exc:
                raise self._mapped(exc) from None
        raise Forbidden("the code host refused the credentials (401)", status=401)

    def _mapped(self, exc: Exception) -> HostError:
        if isinstance(exc, RateLimitExceeded):
            wait = exc.retry_after.total_seconds()
            return RateLimited(
                self._scrub(f"rate limited by the code host: wait {wait:.0f} s"),
                status=exc.response.status_code,
                retry_after=wait,
            )
        if isinstance(exc, RequestTimeout):
            return Unavailable(f"the code host did not answer within {self._timeout.read} s")
        if isinstance(exc, RequestFailed):
            return self._from_status(exc.response.status_code, exc.response.raw_response)
        if isinstance(exc, GraphQLFailed):
            errors = exc.response.errors or []
            kind = getattr(errors[0], "type", None) if errors else None
            message = self._scrub(errors[0].message if errors else "GraphQL failed")
            if kind == "NOT_FOUND":
                return NotFound(message, status=200)
            if kind == "FORBIDDEN":
                return Forbidden(message, status=200)
            return Refused(message, status=200)
        if isinstance(exc, RequestError):
            return Unavailable("the code host could not be reached")
        if isinstance(exc, AuthCredentialError | ValueError | TypeError):
            # A key that is not a key (jwt refuses it); its text is never repeated.
            return Unconfigured("the code host's credentials are not usable: check the key")
        return HostError("the code host's answer could not be used")

    def _from_status(self, status: int, response: httpx.Response) -> HostError:
        try:
            message = str(response.json().get("message", ""))[:500]
        except (ValueError, AttributeError):
            message = ""
        detail = self._scrub(f"{message or 'the code host refused'} ({status})")
        if status == 404:
            return NotFound(detail, status=status)
        if status in (401, 403):
            accepted = response.headers.get("X-Accepted-GitHub-Permissions", "")
            missing = tuple(
                part.strip().replace("=", ": ")
                for part in re.split(r"[;,]", accepted)
                if "=" in part
            )
            return Forbidden(detail, status=status, missing=missing)
        if status >= 500:
            return Unavailable(detail, status=status)
        return Refused(detail, status=status)

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "[secret]")
        return text

    # The seam

    def check_access(self) -> Access:
        """Each permission the site needs and the credentials lack, named as GitHub names
        it in an App's settings (``pull_requests: write``)."""
        missing: list[str] = []
        notes: list[str] = []
        if self._token:
            try:
                response = self._call(lambda g: g.rest.repos.get(self.owner, self.name))
            except NotFound:
                return Access((f"repository: {self.repository_name} is not visible to the token",))
            permissions = response.json().get("permissions") or {}
            scopes = response.headers.get("X-OAuth-Scopes")
            if scopes is not None and "repo" not in [s.strip() for s in scopes.split(",")]:
                missing.append("scope: repo")
            if not permissions.get("push"):
                missing.append("contents: write")
            if not permissions.get("admin"):
                missing.append("administration: read")
            if scopes is None:
                notes.append("a fine-grained token's permissions cannot be read back in full")
            return Access(tuple(missing), tuple(notes))
        installation = self._call(
            lambda g: g.rest.apps.get_installation(self._installation_id), as_app=True
        )
        held = installation.json().get("permissions") or {}
        for name, level in REQUIRED.items():
            if LEVELS.get(held.get(name, ""), 0) < LEVELS[level]:
                missing.append(f"{name}: {level}")
        try:
            repository = self.repository()
        except NotFound:
            missing.append(f"repository: {self.repository_name} is not in the installation")
            return Access(tuple(missing))
        if (
            "administration: read" not in missing
            and LEVELS.get(held.get("merge_queues", ""), 0) < LEVELS["write"]
            and self.protection(repository.default_branch).merge_queue
        ):
            missing.append("merge_queues: write")
        return Access(tuple(missing))

    def repository(self) -> Repository:
        data = self._call(lambda g: g.rest.repos.get(self.owner, self.name)).json()
        return Repository(
            data["full_name"], data["default_branch"], data["node_id"], data["private"]
        )

    def protection(self, branch: str) -> Protection:
        """The classic protection and the repository's rulesets on ``branch``, together."""
        try:
            classic = self._call(
                lambda g: g.rest.repos.get_branch_protection(self.owner, self.name, branch)
            ).json()
        except NotFound:
            classic = None
        rules = self._call(
            lambda g: g.rest.repos.get_branch_rules(self.owner, self.name, branch)
        ).json()
        checks: list[str] = []
        strict = merge_queue = False
        reviews = 0
        if classic:
            status_checks = classic.get("required_status_checks") or {}
            checks += status_checks.get("contexts") or []
            strict = bool(status_checks.get("strict"))
            reviews = (classic.get("required_pull_request_reviews") or {}).get(
                "required_approving_review_count", 0
            )
        for rule in rules:
            parameters = rule.get("parameters") or {}
            if rule["type"] == "merge_queue":
                merge_queue = True
            elif rule["type"] == "required_status_checks":
                checks += [c["context"] for c in parameters.get("required_status_checks", [])]
                strict = strict or bool(parameters.get("strict_required_status_checks_policy"))
            elif rule["type"] == "pull_request":
                reviews = max(reviews, parameters.get("required_approving_review_count", 0))
        return Protection(
            branch,
            protected=bool(classic) or bool(rules),
            required_checks=tuple(dict.fromkeys(checks)),
            strict=strict,
            required_reviews=reviews,
            merge_queue=merge_queue,
        )

    def _pull(self, data: dict) -> PullRequest:
        return PullRequest(
            number=data["number"],
            node_id=data["node_id"],
            url=data["html_url"],
            state=data["state"],
            merged=bool(data.get("merged") or data.get("merged_at")),
            draft=bool(data.get("draft")),
            title=data["title"],
            body=data.get("body") or "",
            head_ref=data["head"]["ref"],
            head_sha=data["head"]["sha"],
            base_ref=data["base"]["ref"],
            base_sha=data["base"]["sha"],
            author=(data.get("user") or {}).get("login", ""),
            merge_commit_sha=data.get("merge_commit_sha"),
            closed_at=data.get("closed_at"),
        )

    def pull_request(self, number: int) -> PullRequest:
        return self._pull(
            self._call(lambda g: g.rest.pulls.get(self.owner, self.name, number)).json()
        )

    def open_or_update_pull_request(
        self, *, task: str, head: str, base: str, title: str, body: str, draft: bool
    ) -> PullRequest:
        """The task's one open pull request from ``head`` into ``base``, opened or brought
        up to date. An open pull request from that branch that is not the task's (its body
        lacks the task's marker) is refused, not taken over. The task's own, retargeted by
        a person to another base, is put back on ``base``: the site lands into its
        project's target, and a retarget is not a withdrawal."""
        marker = MARKER.format(task=task)
        text = f"{fitted(body, MAX_TEXT - len(marker) - 2)}\n\n{marker}"

        def open_from_head() -> list[dict]:
            # Any base: the task's own may have been retargeted.
            return self._call(
                lambda g: g.rest.pulls.list(
                    self.owner, self.name, state="open", head=f"{self.owner}:{head}"
                )
            ).json()

        found = open_from_head()
        ours = [p for p in found if marker in (p.get("body") or "")]
        if not ours:
            for other in found:
                if other["base"]["ref"] == base:
                    raise Refused(
                        f"pull request #{other['number']} from {head} is not task {task}'s"
                    )
            try:
                data = self._call(
                    lambda g: g.rest.pulls.create(
                        self.owner,
                        self.name,
                        data={
                            "head": head,
                            "base": base,
                            "title": title,
                            "body": text,
                            "draft": draft,
                        },
                    )
                ).json()
                return self._pull(data)
            except Refused:
                # Opened meanwhile (a lost answer to our own create): take it up below.
                ours = [p for p in open_from_head() if marker in (p.get("body") or "")]
                if not ours:
                    raise
        number = ours[0]["number"]
        pull = self._pull(
            self._call(
                lambda g: g.rest.pulls.update(
                    self.owner, self.name, number, data={"title": title, "body": text, "base": base}
                )
            ).json()
        )
        return pull if pull.draft == draft else self.set_draft(pull, draft)

    def open_pull_requests(self, *, task: str, head: str) -> list[PullRequest]:
        """The task's open pull requests from ``head`` (its marker in the body), any base."""
        marker = MARKER.format(task=task)
        found = self._call(
            lambda g: g.rest.pulls.list(
                self.owner, self.name, state="open", head=f"{self.owner}:{head}"
            )
        ).json()
        return [self._pull(p) for p in found if marker in (p.get("body") or "")]

    def set_draft(self, pull: PullRequest, draft: bool) -> PullRequest:
        """Draft or ready for review: GraphQL only (REST cannot change it)."""
        self._call(lambda g: g.graphql.request(DRAFT if draft else READY, {"id": pull.node_id}))
        return self.pull_request(pull.number)

    def check_run(
        self,
        *,
        name: str,
        head_sha: str,
        status: str,
        conclusion: str | None = None,
        title: str = "",
        summary: str = "",
        annotations: tuple[Annotation, ...] = (),
        details_url: str | None = None,
        check_run_id: int | None = None,
    ) -> CheckRun:
        """Create (or, given ``check_run_id``, update) a check run on ``head_sha``; more
        annotations than GitHub takes at once follow in updates of the same run."""
        notes = [
            {
                "path": a.path,
                "start_line": a.start_line,
                "end_line": a.end_line,
                "annotation_level": a.level,
                "message": a.message,
                **({"title": a.title} if a.title else {}),
            }
            for a in annotations
        ]
        chunks = [
            notes[i : i + ANNOTATIONS_PER_REQUEST]
            for i in range(0, len(notes), ANNOTATIONS_PER_REQUEST)
        ] or [[]]
        data: dict[str, Any] = (
            {"status": status} if conclusion is None else {"conclusion": conclusion}
        )
        if details_url:
            data["details_url"] = details_url
        output = {"title": fitted(title or name, 1000), "summary": fitted(summary or name)}
        data["output"] = {**output, "annotations": chunks[0]} if chunks[0] else output
        if check_run_id is None:
            answer = self._call(
                lambda g: g.rest.checks.create(
                    self.owner, self.name, data={"name": name, "head_sha": head_sha, **data}
                )
            ).json()
        else:
            answer = self._call(
                lambda g: g.rest.checks.update(self.owner, self.name, check_run_id, data=data)
            ).json()
        run_id = answer["id"]
        for chunk in chunks[1:]:
            answer = self._call(
                lambda g, chunk=chunk: g.rest.checks.update(
                    self.owner,
                    self.name,
                    run_id,
                    data={"output": {**output, "annotations": chunk}},
                )
            ).json()
        return CheckRun(
            answer["id"],
            answer["name"],
            answer["head_sha"],
            answer["status"],
            answer.get("conclusion"),
            answer["html_url"],
        )

    def comment(self, number: int, body: str) -> Comment:
        data = self._call(
            lambda g: g.rest.issues.create_comment(
                self.owner, self.name, number, data={"body": body}
            )
        ).json()
        return Comment(data["id"], data["html_url"])

    def review_comment(
        self,
        number: int,
        *,
        body: str,
        commit: str,
        path: str,
        line: int,
        start_line: int | None = None,
        side: str = "new",
    ) -> Comment:
        """A pull request review comment by line (not the deprecated diff ``position``);
        a range names its first line and side too, both on the same side."""
        data = {
            "body": fitted(body),
            "commit_id": commit,
            "path": path,
            "line": line,
            "side": SIDES[side],
        }
        if start_line is not None and start_line != line:
            data |= {"start_line": start_line, "start_side": SIDES[side]}
        answer = self._call(
            lambda g: g.rest.pulls.create_review_comment(self.owner, self.name, number, data=data)
        ).json()
        return Comment(answer["id"], answer["html_url"])

    def comment_marked(self, number: int, marker: str) -> tuple[str, Comment] | None:
        """Read the pull request's review comments, then its plain ones, page after page
        (``_pages``), for the first body holding ``marker``."""
        listings = {
            "review": lambda g, page: g.rest.pulls.list_review_comments(
                self.owner, self.name, number, per_page=self.page_size, page=page
            ),
            "comment": lambda g, page: g.rest.issues.list_comments(
                self.owner, self.name, number, per_page=self.page_size, page=page
            ),
        }
        for kind, listing in listings.items():
            for found in self._pages(f"{kind}s on #{number}", listing):
                for data in found:
                    if marker in (data.get("body") or ""):
                        return kind, Comment(data["id"], data["html_url"])
        return None

    def review_comments(self, number: int) -> list[ReviewComment]:
        """The pull request's review comments, page after page (``_pages``)."""
        found = []

        def listing(g, page):
            return g.rest.pulls.list_review_comments(
                self.owner, self.name, number, per_page=self.page_size, page=page
            )

        for answer in self._pages(f"review comments on #{number}", listing):
            for data in answer:
                user = data.get("user") or {}
                found.append(
                    ReviewComment(
                        id=data["id"],
                        body=data.get("body") or "",
                        author=HostUser(id=user.get("id") or 0, login=user.get("login") or ""),
                        url=data.get("html_url") or "",
                        written_at=data.get("created_at") or "",
                        in_reply_to=data.get("in_reply_to_id"),
                    )
                )
        return found

    def _pages(self, what: str, listing):
        """Each page's items of ``listing(g, page)``, as long as the host's ``Link`` names a
        next one, ``max_pages`` at most: past them a ``HostError`` names ``what``, so a
        host that always names a next page (or a listing grown past any sense) ends the
        call rather than holding the job for ever."""
        for page in range(1, self.max_pages + 1):
            response = self._call(lambda g, page=page: listing(g, page))
            yield response.json()
            if 'rel="next"' not in response.headers.get("Link", ""):
                return
        raise HostError(
            f"the host named a page after {self.max_pages} pages of {what}"
            f" ({self.page_size} a page): not read further"
        )

    def merge(
        self,
        pull: PullRequest,
        *,
        sha: str,
        method: str = "merge",
        title: str = "",
        message: str = "",
    ) -> Merged:
        """Merge pinned to ``sha``: GitHub refuses (409) if the head moved meanwhile, and
        (405) if a required check is not green or the branch is behind a strict target."""
        data: dict[str, Any] = {"sha": sha, "merge_method": method}
        if title:
            data["commit_title"] = fitted(title, 1000)
        if message:
            data["commit_message"] = fitted(message)
        answer = self._call(
            lambda g: g.rest.pulls.merge(self.owner, self.name, pull.number, data=data)
        ).json()
        return Merged(answer["sha"], answer["message"])

    def commit_checks(self, sha: str) -> dict[str, str]:
        """The commit's status check rollup (GraphQL: one query gives check runs and
        commit statuses together, which REST gives in two operations), page after page,
        ``max_pages`` at most."""
        found: dict[str, tuple[int, str]] = {}
        after = None
        for _ in range(self.max_pages):
            answer = self._call(
                lambda g, after=after: g.graphql.request(
                    ROLLUP, {"owner": self.owner, "name": self.name, "oid": sha, "after": after}
                )
            )
            commit = (answer.get("repository") or {}).get("object") or {}
            rollup = commit.get("statusCheckRollup")
            if rollup is None:
                break  # nothing was posted on the commit yet
            contexts = rollup["contexts"]
            for node in contexts["nodes"] or []:
                if node is None:
                    continue
                if node["__typename"] == "CheckRun":
                    state = "pending" if node["status"] != "COMPLETED" else node["conclusion"]
                    name, order = node["name"], node.get("databaseId") or 0
                else:
                    name, state, order = node["context"], STATUS_STATES[node["state"]], 0
                if name not in found or order >= found[name][0]:
                    found[name] = (order, (state or "pending").lower())
            if not contexts["pageInfo"]["hasNextPage"]:
                break
            after = contexts["pageInfo"]["endCursor"]
        else:
            raise HostError(
                f"the host named a page after {self.max_pages} pages of checks on {sha[:12]}"
                f": not read further"
            )
        return {name: state for name, (_, state) in found.items()}

    def update_branch(self, pull: PullRequest, *, expected_head_sha: str) -> None:
        """Merge the base into the pull request's branch, only from ``expected_head_sha``."""
        self._call(
            lambda g: g.rest.pulls.update_branch(
                self.owner,
                self.name,
                pull.number,
                data={"expected_head_sha": expected_head_sha},
            )
        )

    def _entry(self, answer: dict, field: str) -> QueueEntry:
        entry = (answer.get(field) or {}).get("mergeQueueEntry") or {}
        return QueueEntry(entry.get("id", ""), entry.get("position", 0), entry.get("state", ""))

    def enqueue_pull_request(self, pull: PullRequest, *, expected_head_sha: str) -> QueueEntry:
        """Into the target's merge queue, only at ``expected_head_sha`` (GraphQL only)."""
        answer = self._call(
            lambda g: g.graphql.request(ENQUEUE, {"id": pull.node_id, "head": expected_head_sha})
        )
        return self._entry(answer, "enqueuePullRequest")

    def dequeue_pull_request(self, pull: PullRequest) -> QueueEntry:
        answer = self._call(lambda g: g.graphql.request(DEQUEUE, {"id": pull.node_id}))
        return self._entry(answer, "dequeuePullRequest")

    def queue_entry(self, number: int) -> QueueEntry | None:
        """Where pull request ``number`` stands in its target's merge queue, and its merge
        group (GraphQL only: REST has no merge queue)."""
        answer = self._call(
            lambda g: g.graphql.request(
                ENTRY, {"owner": self.owner, "name": self.name, "number": number}
            )
        )
        pull = (answer.get("repository") or {}).get("pullRequest")
        if pull is None:
            raise NotFound(f"pull request #{number} is not on the host")
        entry = pull.get("mergeQueueEntry")
        if not entry:
            return None
        return QueueEntry(
            entry.get("id", ""),
            entry.get("position", 0),
            entry.get("state", ""),
            head_sha=(entry.get("headCommit") or {}).get("oid", ""),
            base_sha=(entry.get("baseCommit") or {}).get("oid", ""),
        )

    def _issue(self, data: dict) -> Issue:
        return Issue(
            number=data["number"],
            title=data["title"],
            body=data.get("body") or "",
            state=data["state"],
            labels=tuple(
                label["name"] if isinstance(label, dict) else label for label in data["labels"]
            ),
            author=(data.get("user") or {}).get("login", ""),
            url=data["html_url"],
            pull_request="pull_request" in data,
            closed_by=(data.get("closed_by") or {}).get("login", ""),
            closed_by_id=(data.get("closed_by") or {}).get("id"),
        )

    def issues_with_label(self, label: str, *, state: str = "open") -> list[Issue]:
        """Every issue carrying ``label`` (pull requests left out), page after page
        (``_pages``)."""

        def listing(g, page):
            return g.rest.issues.list_for_repo(
                self.owner, self.name, labels=label, state=state, per_page=self.page_size, page=page
            )

        return [
            self._issue(i)
            for found in self._pages(f"issues labelled {label!r}", listing)
            for i in found
            if "pull_request" not in i
        ]

    def issue(self, number: int) -> Issue:
        return self._issue(
            self._call(lambda g: g.rest.issues.get(self.owner, self.name, number)).json()
        )

    def close_issue(self, number: int, comment: str) -> Issue:
        """Say why (unless ``comment`` is empty: said already), then close it as completed."""
        if comment:
            self.comment(number, comment)
        return self._issue(
            self._call(
                lambda g: g.rest.issues.update(
                    self.owner,
                    self.name,
                    number,
                    data={"state": "closed", "state_reason": "completed"},
                )
            ).json()
        )

    def close_pull_request(self, number: int, comment: str) -> PullRequest:
        """Say why (unless ``comment`` is empty), then close the pull request unmerged."""
        if comment:
            self.comment(number, comment)
        return self._pull(
            self._call(
                lambda g: g.rest.pulls.update(
                    self.owner, self.name, number, data={"state": "closed"}
                )
            ).json()
        )

    def user(self, login: str) -> HostUser:
        """The account named ``login`` now (``NotFound`` when none is): its number, which a
        rename keeps, and its login as the host spells it."""
        data = self._call(lambda g: g.rest.users.get_by_username(login)).json()
        return HostUser(id=data["id"], login=data["login"])

    def pushed_by(self, branch: str, sha: str) -> HostUser | None:
        """Who moved ``branch`` to ``sha``, as the repository's activity says (the newest
        of the branch's pushes, force pushes and creation that ends at ``sha``); None when
        the activity names nobody (a deleted account) or holds no such push (a branch of
        a fork, whose pushes are the fork's)."""
        answer = self._call(
            lambda g: g.rest.repos.list_activities(
                self.owner, self.name, ref=f"refs/heads/{branch}", per_page=PUSHES_READ
            )
        ).json()
        for activity in answer:
            if activity.get("after") == sha and activity.get("activity_type") in PUSHES:
                actor = activity.get("actor") or {}
                if isinstance(actor.get("id"), int) and actor.get("login"):
                    return HostUser(id=actor["id"], login=actor["login"])
                return None
        return None
