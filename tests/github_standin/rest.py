"""The REST operations the stand-in answers, each as GitHub answers it, built over the
description's own skeleton of the response (``description.skeleton``) so that what GitHub
always sends is there; the server checks every answer against the description again."""

import json
from datetime import UTC, datetime, timedelta
from functools import cache

from tests.github_standin.description import description, overlay, skeleton
from tests.github_standin.world import (
    Check,
    Comment,
    Issue,
    Pull,
    Repo,
    ReviewComment,
    World,
)

DOCS = "https://docs.github.com/rest"
THREAD = "pull_request_review_thread"  # how GitHub names a review comment's fields refused


class Answer(Exception):
    """An answer other than success, raised from deep in a handler."""

    def __init__(self, status: int, message: str, headers: dict | None = None, errors=None):
        self.status = status
        self.body = {"message": message, "documentation_url": DOCS}
        if errors is not None:
            self.body["errors"] = errors
        self.headers = headers or {}


@cache
def _skeleton(name: str) -> str:
    return json.dumps(skeleton(description(), {"$ref": f"#/components/schemas/{name}"}))


def shaped(name: str, values: dict) -> dict:
    return overlay(json.loads(_skeleton(name)), values)


class Rest:
    """One handler per operation (``"METHOD /template"``); each returns (status, body)."""

    def __init__(self, world: World, url: str):
        self.world = world
        self.url = url

    # Shapes

    def user(self, login: str, bot: bool = False) -> dict:
        return shaped(
            "simple-user",
            {
                "login": login,
                "id": self.user_id(login),
                "node_id": f"U_{login}",
                "type": "Bot" if bot else "User",
                "url": f"{self.url}/users/{login}",
                "html_url": f"https://standin.invalid/{login}",
            },
        )

    def user_id(self, login: str) -> int:
        """A person's account number where they signed up (``World.person``), else a
        number of the login's own."""
        known = self.world.people.get(login.lower())
        return known[0] if known else abs(hash(login)) % 10**8

    def repository(self, repo: Repo, permissions: dict | None = None) -> dict:
        values = {
            "id": repo.id,
            "node_id": f"R_{repo.id}",
            "name": repo.name,
            "full_name": repo.full_name,
            "owner": self.user(repo.owner),
            "private": repo.private,
            "visibility": "private" if repo.private else "public",
            "default_branch": repo.default_branch,
            "url": f"{self.url}/repos/{repo.full_name}",
            "html_url": f"https://standin.invalid/{repo.full_name}",
        }
        if permissions is not None:
            values["permissions"] = permissions
        return shaped("full-repository", values)

    def pull(self, repo: Repo, pull: Pull) -> dict:
        head = repo.git.head(pull.head) or "0" * 40
        base = repo.git.head(pull.base) or "0" * 40
        where = f"{self.url}/repos/{repo.full_name}"

        def end(ref, sha):
            return {
                "ref": ref,
                "sha": sha,
                "label": f"{repo.owner}:{ref}",
                "repo": shaped("repository", self.repository(repo)),
                "user": self.user(repo.owner),
            }

        return shaped(
            "pull-request",
            {
                "id": pull.number + repo.id * 1000,
                "node_id": pull.node_id,
                "number": pull.number,
                "state": pull.state,
                "title": pull.title,
                "body": pull.body,
                "draft": pull.draft,
                "merged": pull.merged,
                "merge_commit_sha": pull.merge_commit_sha,
                "closed_at": pull.closed_at,
                "mergeable_state": "clean" if pull.state == "open" else "unknown",
                "user": self.user(pull.user, bot=pull.user.endswith("[bot]")),
                "head": end(pull.head, head),
                "base": end(pull.base, base),
                "url": f"{where}/pulls/{pull.number}",
                "html_url": f"https://standin.invalid/{repo.full_name}/pull/{pull.number}",
                "labels": [],
            },
        )

    def issue(self, repo: Repo, issue: Issue) -> dict:
        return shaped(
            "issue",
            {
                "id": issue.number + repo.id * 1000,
                "node_id": issue.node_id,
                "number": issue.number,
                "state": issue.state,
                "closed_by": self.user(issue.closed_by) if issue.closed_by else None,
                "title": issue.title,
                "body": issue.body,
                "user": self.user(issue.user),
                "labels": [
                    {"id": abs(hash(n)) % 10**8, "name": n, "color": "ededed", "default": False}
                    for n in issue.labels
                ],
                "url": f"{self.url}/repos/{repo.full_name}/issues/{issue.number}",
                "html_url": f"https://standin.invalid/{repo.full_name}/issues/{issue.number}",
                # GitHub's issues API answers a pull request's number too, saying so.
                **(
                    {
                        "pull_request": {
                            k: f"https://standin.invalid/{repo.full_name}/pull/{issue.number}"
                            for k in ("url", "html_url", "diff_url", "patch_url")
                        }
                    }
                    if issue.number in repo.pulls
                    else {}
                ),
            },
        )

    def check(self, repo: Repo, check: Check) -> dict:
        app = shaped(
            "integration",
            {"id": check.app_id or 0, "slug": self.world.app_slug, "name": self.world.app_slug},
        )
        return shaped(
            "check-run",
            {
                "id": check.id,
                "node_id": check.node_id,
                "name": check.name,
                "head_sha": check.head_sha,
                "status": check.status,
                "conclusion": check.conclusion,
                "details_url": check.details_url,
                "app": app,
                "output": {
                    "title": check.output.get("title"),
                    "summary": check.output.get("summary"),
                    "text": check.output.get("text"),
                    "annotations_count": len(check.annotations),
                    "annotations_url": f"{self.url}/repos/{repo.full_name}/check-runs/"
                    f"{check.id}/annotations",
                },
                "url": f"{self.url}/repos/{repo.full_name}/check-runs/{check.id}",
                "html_url": f"https://standin.invalid/{repo.full_name}/runs/{check.id}",
            },
        )

    # Lookups that answer 404 as GitHub does

    def find_repo(self, params) -> Repo:
        repo = self.world.repo(params["owner"], params["repo"])
        if repo is None:
            raise Answer(404, "Not Found")
        return repo

    def find_pull(self, repo: Repo, number: str) -> Pull:
        pull = repo.pulls.get(int(number))
        if pull is None:
            raise Answer(404, "Not Found")
        return pull

    def find_issue(self, repo: Repo, number: str) -> Issue:
        if int(number) in repo.pulls:
            pull = repo.pulls[int(number)]
            return Issue(
                int(number),
                pull.node_id,
                pull.title,
                pull.body,
                pull.labels,
                pull.user,
                pull.state,
                pull.closed_by,
            )
        issue = repo.issues.get(int(number))
        if issue is None:
            raise Answer(404, "Not Found")
        return issue

    # Operations

    def get_user(self, params, query, body, caller):
        known = self.world.people.get(params["username"].lower())
        if known is None:
            raise Answer(404, "Not Found")
        number, login = known
        return 200, shaped(
            "public-user",
            {
                "login": login,
                "id": number,
                "node_id": f"U_{login}",
                "type": "User",
                "user_view_type": "public",
                "url": f"{self.url}/users/{login}",
                "html_url": f"https://standin.invalid/{login}",
                "created_at": "2020-01-01T00:00:00Z",
                "updated_at": "2020-01-01T00:00:00Z",
            },
        )

    def get_installation(self, params, query, body, caller):
        installation = self.world.installations.get(int(params["installation_id"]))
        if installation is None:
            raise Answer(404, "Not Found")
        return 200, shaped(
            "installation",
            {
                "id": installation.id,
                "account": self.user(installation.account),
                "app_id": self.world.app_id,
                "app_slug": self.world.app_slug,
                "target_id": 1,
                "target_type": "Organization",
                "permissions": installation.permissions,
                "repository_selection": "selected",
                "events": ["pull_request", "issues", "check_suite", "merge_group"],
                "access_tokens_url": f"{self.url}/app/installations/{installation.id}/"
                "access_tokens",
                "repositories_url": f"{self.url}/installation/repositories",
                "html_url": f"https://standin.invalid/settings/installations/{installation.id}",
            },
        )

    def create_installation_token(self, params, query, body, caller):
        installation = self.world.installations.get(int(params["installation_id"]))
        if installation is None:
            raise Answer(404, "Not Found")
        token = self.world.mint(installation, timedelta(hours=1))
        return 201, shaped(
            "installation-token",
            {
                "token": token.value,
                "expires_at": token.expires_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "permissions": installation.permissions,
                "repository_selection": "selected",
            },
        )

    def get_repo(self, params, query, body, caller):
        repo = self.find_repo(params)
        permissions = None
        if caller.login:
            permissions = {
                "admin": caller.admin,
                "maintain": caller.admin,
                "push": caller.push,
                "triage": caller.push,
                "pull": True,
            }
        return 200, self.repository(repo, permissions)

    def get_protection(self, params, query, body, caller):
        repo = self.find_repo(params)
        protection = repo.protection.get(params["branch"])
        if protection is None:
            raise Answer(404, "Branch not protected")
        where = f"{self.url}/repos/{repo.full_name}/branches/{params['branch']}/protection"
        answer = {
            "url": where,
            "required_status_checks": {
                "url": f"{where}/required_status_checks",
                "strict": protection.strict,
                "contexts": list(protection.required_checks),
                "checks": [{"context": c, "app_id": None} for c in protection.required_checks],
                "contexts_url": f"{where}/required_status_checks/contexts",
            },
        }
        if protection.required_reviews:
            answer["required_pull_request_reviews"] = {
                "url": f"{where}/required_pull_request_reviews",
                "required_approving_review_count": protection.required_reviews,
                "dismiss_stale_reviews": True,
                "require_code_owner_reviews": False,
            }
        return 200, shaped("branch-protection", answer)

    def get_branch_rules(self, params, query, body, caller):
        repo = self.find_repo(params)
        protection = repo.protection.get(params["branch"])
        rules = []
        if protection is not None and protection.merge_queue:
            rules.append(
                {
                    "type": "merge_queue",
                    "ruleset_source_type": "Repository",
                    "ruleset_source": repo.full_name,
                    "ruleset_id": 1,
                    "parameters": {
                        "check_response_timeout_minutes": 60,
                        "grouping_strategy": "ALLGREEN",
                        "max_entries_to_build": 5,
                        "max_entries_to_merge": 5,
                        "merge_method": "MERGE",
                        "min_entries_to_merge": 1,
                        "min_entries_to_merge_wait_minutes": 5,
                    },
                }
            )
        return 200, rules

    def list_activity(self, params, query, body, caller):
        """The repository's activity on branches, newest first, from the ref logs (pushes,
        force pushes, branch creations; ``ref`` and ``activity_type`` filter it). One page
        of ``per_page``: the site reads only the newest of a branch."""
        repo = self.find_repo(params)
        ref = query.get("ref", "")
        branches = [ref.removeprefix("refs/heads/")] if ref else repo.git.branches()
        found = []
        for branch in branches:
            for before, after, who, when in repo.git.pushes(branch):
                if before == "0" * 40:
                    kind = "branch_creation"
                elif repo.git.contains(before, after):
                    kind = "push"
                else:
                    kind = "force_push"
                if query.get("activity_type", kind) != kind:
                    continue
                actor = None
                if who:
                    actor = self.user(who, bot=who.endswith("[bot]"))
                found.append(
                    shaped(
                        "activity",
                        {
                            "id": len(found) + 1,
                            "node_id": f"RA_{repo.id}_{branch}_{len(found)}",
                            "before": before,
                            "after": after,
                            "ref": f"refs/heads/{branch}",
                            "timestamp": datetime.fromtimestamp(when, UTC).strftime(
                                "%Y-%m-%dT%H:%M:%SZ"
                            ),
                            "activity_type": kind,
                            "actor": actor,
                        },
                    )
                )
        return 200, found[: int(query.get("per_page", 30))]

    def list_pulls(self, params, query, body, caller):
        repo = self.find_repo(params)
        state = query.get("state", "open")
        head = query.get("head")
        found = [
            p
            for p in sorted(repo.pulls.values(), key=lambda p: -p.number)
            if (state == "all" or p.state == state)
            and (head is None or f"{repo.owner}:{p.head}" == head)
            and ("base" not in query or p.base == query["base"])
        ]
        return 200, [shaped("pull-request-simple", self.pull(repo, p)) for p in found]

    def create_pull(self, params, query, body, caller):
        repo = self.find_repo(params)
        for ref in (body["head"], body["base"]):
            if repo.git.head(ref) is None:
                raise Answer(
                    422,
                    "Validation Failed",
                    errors=[{"resource": "PullRequest", "field": "head", "code": "invalid"}],
                )
        if any(p.head == body["head"] and p.state == "open" for p in repo.pulls.values()):
            raise Answer(
                422,
                "Validation Failed",
                errors=[
                    {
                        "resource": "PullRequest",
                        "code": "custom",
                        "message": f"A pull request already exists for {repo.owner}:"
                        f"{body['head']}.",
                    }
                ],
            )
        number = self.world.next_number(repo)
        login = f"{self.world.app_slug}[bot]" if caller.installation else caller.login
        pull = Pull(
            number,
            f"PR_{repo.id}_{number}",
            body["head"],
            body["base"],
            body.get("title", ""),
            body.get("body"),
            bool(body.get("draft", False)),
            login,
        )
        repo.pulls[number] = pull
        return 201, self.pull(repo, pull)

    def get_pull(self, params, query, body, caller):
        repo = self.find_repo(params)
        return 200, self.pull(repo, self.find_pull(repo, params["pull_number"]))

    def update_pull(self, params, query, body, caller):
        repo = self.find_repo(params)
        pull = self.find_pull(repo, params["pull_number"])
        for name in ("title", "body", "base"):
            if name in body:
                setattr(pull, name, body[name])
        if body.get("state") in ("open", "closed") and not pull.merged:
            if body["state"] == "closed" and pull.state == "open":
                # The closer, as the issue's answer for the number says (``closed_by``).
                pull.closed_by = (
                    f"{self.world.app_slug}[bot]" if caller.installation else caller.login
                )
                pull.closed_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            pull.state = body["state"]
        return 200, self.pull(repo, pull)

    def merge_pull(self, params, query, body, caller):
        repo = self.find_repo(params)
        pull = self.find_pull(repo, params["pull_number"])
        body = body or {}
        refusal = self.world.merge_refusal(repo, pull, body.get("sha"))
        if refusal:
            raise Answer(*refusal)
        method = body.get("merge_method", "merge")
        if method == "rebase":
            raise Answer(405, "Rebase merges are not allowed on this repository.")
        title = body.get("commit_title") or pull.title
        text = f"{title}\n\n{body['commit_message']}" if body.get("commit_message") else title
        sha = self.world.merge(repo, pull, method, text)
        if sha is None:
            raise Answer(405, "Pull Request is not mergeable")
        return 200, {"sha": sha, "merged": True, "message": "Pull Request successfully merged"}

    def update_branch(self, params, query, body, caller):
        repo = self.find_repo(params)
        pull = self.find_pull(repo, params["pull_number"])
        expected = (body or {}).get("expected_head_sha")
        if expected is not None and expected != repo.git.head(pull.head):
            raise Answer(422, "expected head sha didn't match current head ref.")
        if self.world.update_branch(repo, pull) is None:
            raise Answer(422, "merge conflict between base and head")
        return 202, {
            "message": "Updating pull request branch.",
            "url": f"https://standin.invalid/{repo.full_name}/pull/{pull.number}",
        }

    def create_check(self, params, query, body, caller):
        repo = self.find_repo(params)
        check = Check(
            self.world.next_id(),
            "",
            body["name"],
            body["head_sha"],
            body.get("status", "queued") if "conclusion" not in body else "completed",
            body.get("conclusion"),
            self.world.app_id if caller.installation else None,
            details_url=body.get("details_url"),
        )
        check.node_id = f"CR_{check.id}"
        self._check_output(check, body)
        repo.checks[check.id] = check
        return 201, self.check(repo, check)

    def update_check(self, params, query, body, caller):
        repo = self.find_repo(params)
        check = repo.checks.get(int(params["check_run_id"]))
        if check is None:
            raise Answer(404, "Not Found")
        if "conclusion" in body:
            check.status, check.conclusion = "completed", body["conclusion"]
        elif "status" in body:
            check.status = body["status"]
        if "details_url" in body:
            check.details_url = body["details_url"]
        self._check_output(check, body)
        return 200, self.check(repo, check)

    def _check_output(self, check: Check, body: dict) -> None:
        output = body.get("output") or {}
        if len(output.get("annotations", [])) > 50:
            # GitHub's limit per request; more are sent by updating the run.
            raise Answer(422, "Only 50 annotations are allowed per request")
        check.output.update({k: output[k] for k in ("title", "summary", "text") if k in output})
        check.annotations += output.get("annotations", [])

    def list_issues(self, params, query, body, caller):
        repo = self.find_repo(params)
        labels = [n for n in query.get("labels", "").split(",") if n]
        state = query.get("state", "open")
        found = [
            i
            for i in sorted(repo.issues.values(), key=lambda i: -i.number)
            if (state == "all" or i.state == state) and all(n in i.labels for n in labels)
        ]
        per_page = int(query.get("per_page", 30))
        page = int(query.get("page", 1))
        chunk = found[(page - 1) * per_page : page * per_page]
        headers = {}
        if page * per_page < len(found):
            kept = {k: v for k, v in query.items() if k != "page"}
            link = "&".join(f"{k}={v}" for k, v in {**kept, "page": page + 1}.items())
            headers["Link"] = f'<{self.url}/repos/{repo.full_name}/issues?{link}>; rel="next"'
        return 200, [self.issue(repo, i) for i in chunk], headers

    def get_issue(self, params, query, body, caller):
        repo = self.find_repo(params)
        return 200, self.issue(repo, self.find_issue(repo, params["issue_number"]))

    def update_issue(self, params, query, body, caller):
        repo = self.find_repo(params)
        issue = self.find_issue(repo, params["issue_number"])
        for name in ("title", "body", "state"):
            if name in body:
                setattr(issue, name, body[name])
        return 200, self.issue(repo, issue)

    def create_comment(self, params, query, body, caller):
        repo = self.find_repo(params)
        number = int(params["issue_number"])
        self.find_issue(repo, params["issue_number"])
        login = f"{self.world.app_slug}[bot]" if caller.installation else caller.login
        comment = Comment(self.world.next_id(), "", number, body["body"], login)
        comment.node_id = f"IC_{comment.id}"
        repo.comments.append(comment)
        return 201, self.issue_comment(repo, comment)

    def list_issue_comments(self, params, query, body, caller):
        repo = self.find_repo(params)
        number = int(params["issue_number"])
        self.find_issue(repo, params["issue_number"])
        found = [c for c in repo.comments if c.issue == number]
        chunk, headers = self.page(
            found, query, f"/repos/{repo.full_name}/issues/{number}/comments"
        )
        return 200, [self.issue_comment(repo, c) for c in chunk], headers

    def issue_comment(self, repo: Repo, comment: Comment) -> dict:
        return shaped(
            "issue-comment",
            {
                "id": comment.id,
                "node_id": comment.node_id,
                "body": comment.body,
                "user": self.user(comment.user, bot=comment.user.endswith("[bot]")),
                "url": f"{self.url}/repos/{repo.full_name}/issues/comments/{comment.id}",
                "html_url": f"https://standin.invalid/{repo.full_name}/issues/{comment.issue}"
                f"#issuecomment-{comment.id}",
                "issue_url": f"{self.url}/repos/{repo.full_name}/issues/{comment.issue}",
                "author_association": "NONE",
            },
        )

    def page(self, found: list, query: dict, path: str) -> tuple[list, dict]:
        """One page of ``found`` as ``per_page`` and ``page`` ask, and a ``Link`` to the
        next when there is one, as GitHub pages a list."""
        per_page = int(query.get("per_page", 30))
        page = int(query.get("page", 1))
        headers = {}
        if page * per_page < len(found):
            kept = {k: v for k, v in query.items() if k != "page"}
            link = "&".join(f"{k}={v}" for k, v in {**kept, "page": page + 1}.items())
            headers["Link"] = f'<{self.url}{path}?{link}>; rel="next"'
        return found[(page - 1) * per_page : page * per_page], headers

    def create_review_comment(self, params, query, body, caller):
        """A comment on lines the pull request's diff shows at ``commit_id``; refused (422,
        in GitHub's words) for a commit not on the pull request, a file its diff does not
        change, or a line it does not show on that side."""
        repo = self.find_repo(params)
        pull = self.find_pull(repo, params["pull_number"])
        commit, path, line = body["commit_id"], body["path"], body.get("line")
        side = body.get("side", "RIGHT")
        start = body.get("start_line")
        head = repo.git.head(pull.head)
        if head is None or not repo.git.contains(commit, head):
            raise _invalid("commit_id", "commit_id is not part of the pull request")
        files = self.world.diff_lines(repo, pull, commit)
        if path not in files:
            raise _invalid(f"{THREAD}.path", f"{THREAD}.path could not be resolved")
        if line is None or (start is not None and start > line):
            raise _invalid(f"{THREAD}.line", f"{THREAD}.line could not be resolved")
        if body.get("start_side", side) != side:
            raise _invalid(f"{THREAD}.start_side", f"{THREAD}.start_side must match side")
        wanted = range(line if start is None else start, line + 1)
        if any(n not in files[path][side] for n in wanted):
            raise _invalid(f"{THREAD}.line", f"{THREAD}.line must be part of the diff")
        login = f"{self.world.app_slug}[bot]" if caller.installation else caller.login
        made = ReviewComment(
            self.world.next_id(), path, line, start, side, commit, body["body"], login
        )
        pull.review_comments.append(made)
        return 201, self.review_comment(repo, pull, made)

    def list_review_comments(self, params, query, body, caller):
        repo = self.find_repo(params)
        pull = self.find_pull(repo, params["pull_number"])
        path = f"/repos/{repo.full_name}/pulls/{pull.number}/comments"
        chunk, headers = self.page(pull.review_comments, query, path)
        return 200, [self.review_comment(repo, pull, c) for c in chunk], headers

    def review_comment(self, repo: Repo, pull: Pull, made: ReviewComment) -> dict:
        base = f"{self.url}/repos/{repo.full_name}/pulls"
        html = f"https://standin.invalid/{repo.full_name}/pull/{pull.number}"
        return shaped(
            "pull-request-review-comment",
            {
                "id": made.id,
                "node_id": f"PRRC_{made.id}",
                "path": made.path,
                "line": made.line,
                "original_line": made.line,
                "start_line": made.start_line,
                "original_start_line": made.start_line,
                "side": made.side,
                "start_side": made.side if made.start_line is not None else None,
                "commit_id": made.commit,
                "original_commit_id": made.commit,
                "body": made.body,
                "user": self.user(made.user, bot=made.user.endswith("[bot]")),
                "created_at": made.created_at,
                "updated_at": made.created_at,
                **({"in_reply_to_id": made.in_reply_to} if made.in_reply_to else {}),
                "subject_type": "line",
                "url": f"{base}/comments/{made.id}",
                "html_url": f"{html}#discussion_r{made.id}",
                "pull_request_url": f"{base}/{pull.number}",
                "author_association": "NONE",
                "_links": {
                    "self": {"href": f"{base}/comments/{made.id}"},
                    "html": {"href": f"{html}#discussion_r{made.id}"},
                    "pull_request": {"href": f"{base}/{pull.number}"},
                },
            },
        )


def _invalid(field: str, message: str) -> Answer:
    return Answer(
        422,
        "Validation Failed",
        errors=[
            {
                "resource": "PullRequestReviewComment",
                "code": "custom",
                "field": field,
                "message": message,
            }
        ],
    )


# The operations, what each needs of an installation's permissions, and its handler.
ROUTES = {
    "GET /app/installations/{installation_id}": ("app", "get_installation"),
    "POST /app/installations/{installation_id}/access_tokens": (
        "app",
        "create_installation_token",
    ),
    "GET /repos/{owner}/{repo}": (("metadata", "read"), "get_repo"),
    # GitHub's documentation names no permission beyond read access (docs/code-hosts.md).
    "GET /repos/{owner}/{repo}/activity": (("metadata", "read"), "list_activity"),
    "GET /repos/{owner}/{repo}/branches/{branch}/protection": (
        ("administration", "read"),
        "get_protection",
    ),
    "GET /repos/{owner}/{repo}/rules/branches/{branch}": (
        ("metadata", "read"),
        "get_branch_rules",
    ),
    "GET /repos/{owner}/{repo}/pulls": (("pull_requests", "read"), "list_pulls"),
    "POST /repos/{owner}/{repo}/pulls": (("pull_requests", "write"), "create_pull"),
    "GET /repos/{owner}/{repo}/pulls/{pull_number}": (("pull_requests", "read"), "get_pull"),
    "PATCH /repos/{owner}/{repo}/pulls/{pull_number}": (("pull_requests", "write"), "update_pull"),
    "PUT /repos/{owner}/{repo}/pulls/{pull_number}/merge": (("contents", "write"), "merge_pull"),
    "PUT /repos/{owner}/{repo}/pulls/{pull_number}/update-branch": (
        ("contents", "write"),
        "update_branch",
    ),
    "GET /repos/{owner}/{repo}/pulls/{pull_number}/comments": (
        ("pull_requests", "read"),
        "list_review_comments",
    ),
    "POST /repos/{owner}/{repo}/pulls/{pull_number}/comments": (
        ("pull_requests", "write"),
        "create_review_comment",
    ),
    "POST /repos/{owner}/{repo}/check-runs": (("checks", "write"), "create_check"),
    "PATCH /repos/{owner}/{repo}/check-runs/{check_run_id}": (("checks", "write"), "update_check"),
    "GET /repos/{owner}/{repo}/issues": (("issues", "read"), "list_issues"),
    "GET /repos/{owner}/{repo}/issues/{issue_number}": (("issues", "read"), "get_issue"),
    "PATCH /repos/{owner}/{repo}/issues/{issue_number}": (("issues", "write"), "update_issue"),
    "GET /repos/{owner}/{repo}/issues/{issue_number}/comments": (
        ("issues", "read"),
        "list_issue_comments",
    ),
    "POST /repos/{owner}/{repo}/issues/{issue_number}/comments": (
        ("issues", "write"),
        "create_comment",
    ),
    # A person's public account: any caller may read it (an App's metadata permission).
    "GET /users/{username}": (("metadata", "read"), "get_user"),
}
