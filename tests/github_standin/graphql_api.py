"""``POST /graphql``: the mutations and the query the provider calls, executed by graphql-core against
GitHub's published schema (``@octokit/graphql-schema``), so a query the schema does not
allow is refused, and every answer has the schema's shape by construction.

The schema as published defines two fields of ``EnterpriseOwnerInfo`` twice and deprecates
fields that implement undeprecated interface fields; both are accepted as GitHub serves
them (README.md).
"""

import gzip
from functools import cache
from pathlib import Path

from graphql import GraphQLError, build_schema, execute, parse, validate

from tests.github_standin.world import Pull, Repo, World

SCHEMA = Path(__file__).resolve().parent / "schema.graphql.gz"
# What each mutation needs of an installation's permissions.
MUTATIONS = {
    "enqueuePullRequest": ("merge_queues", "write"),
    "dequeuePullRequest": ("merge_queues", "write"),
    "markPullRequestReadyForReview": ("pull_requests", "write"),
    "convertPullRequestToDraft": ("pull_requests", "write"),
    # The queries: a commit's status check rollup (check runs and commit statuses), and a
    # pull request's merge queue entry.
    "repository": ("checks", "read"),
}
# A check run's state as the schema spells it; a commit status's.
CHECK_STATUSES = {"queued": "QUEUED", "in_progress": "IN_PROGRESS", "completed": "COMPLETED"}
STATUS_STATES = {"success", "failure", "error", "pending"}


@cache
def schema():
    built = build_schema(gzip.decompress(SCHEMA.read_bytes()).decode(), assume_valid_sdl=True)
    # GitHub's schema deprecates some fields that implement an undeprecated interface
    # field, which graphql-core 3.3's schema check refuses; GitHub serves it as it is, and
    # documents are still validated against it (graphql-core keeps its verdict here).
    built._validation_errors = []
    return built


class Refusal(GraphQLError):
    """A mutation GitHub refuses, with GitHub's error ``type``."""

    def __init__(self, message: str, kind: str):
        super().__init__(message, extensions={"type": kind})


class GraphQL:
    def __init__(self, world: World, allowed):
        self.world = world
        self.allowed = allowed  # (permission, level) -> bool, for the caller

    def find(self, node_id: str) -> tuple[Repo, Pull]:
        for repo in self.world.repos.values():
            for pull in repo.pulls.values():
                if pull.node_id == node_id:
                    return repo, pull
        raise Refusal(f"Could not resolve to a node with the global id of '{node_id}'", "NOT_FOUND")

    def entry(self, repo: Repo, pull: Pull) -> dict:
        queued = sorted(
            (p for p in repo.pulls.values() if p.queued and p.base == pull.base),
            key=lambda p: p.enqueued,
        )
        position = next((i + 1 for i, p in enumerate(queued) if p is pull), 0)
        group = pull.group
        return {
            "id": f"MQE_{pull.node_id}",
            "position": position,
            "state": "AWAITING_CHECKS" if group is not None else "QUEUED",
            "headCommit": {"oid": group.head_sha} if group is not None else None,
            "baseCommit": {"oid": group.base_sha} if group is not None else None,
        }

    def enqueuePullRequest(self, info, input):
        repo, pull = self.find(input["pullRequestId"])
        protection = repo.protection.get(pull.base)
        if protection is None or not protection.merge_queue:
            raise Refusal(
                "Pull request is not in a mergeable state for the merge queue", "UNPROCESSABLE"
            )
        head = repo.git.head(pull.head)
        expected = input.get("expectedHeadOid")
        if expected is not None and expected != head:
            raise Refusal("Head ref has been modified since expectedHeadOid", "UNPROCESSABLE")
        if pull.state != "open" or pull.draft:
            raise Refusal("Pull request is not in a mergeable state", "UNPROCESSABLE")
        self.world.enqueue(repo, pull)
        return {"mergeQueueEntry": self.entry(repo, pull), "clientMutationId": None}

    def dequeuePullRequest(self, info, input):
        repo, pull = self.find(input["id"])
        if not pull.queued:
            raise Refusal("Pull request is not in the merge queue", "UNPROCESSABLE")
        entry = self.entry(repo, pull)
        self.world.dequeue(repo, pull, "removed by the App")
        return {"mergeQueueEntry": entry, "clientMutationId": None}

    def _draft(self, input, draft: bool):
        _, pull = self.find(input["pullRequestId"])
        if pull.state != "open":
            raise Refusal("Pull request is closed", "UNPROCESSABLE")
        pull.draft = draft
        return {"pullRequest": {"id": pull.node_id, "isDraft": draft, "number": pull.number}}

    def markPullRequestReadyForReview(self, info, input):
        return self._draft(input, False)

    def convertPullRequestToDraft(self, info, input):
        return self._draft(input, True)

    def repository(self, info, owner, name, **_):
        """``repository { object(oid:) { ... on Commit { statusCheckRollup … } } }``: the
        check runs and commit statuses on a commit, as one page (null when there are none,
        as GitHub answers)."""
        repo = self.world.repo(owner, name)
        if repo is None:
            raise Refusal(
                f"Could not resolve to a Repository with the name '{owner}/{name}'.", "NOT_FOUND"
            )

        def rollup(sha: str) -> dict | None:
            runs = [
                {
                    "__typename": "CheckRun",
                    "name": c.name,
                    "status": CHECK_STATUSES.get(c.status, "QUEUED"),
                    "conclusion": c.conclusion.upper() if c.conclusion else None,
                    "databaseId": c.id,
                }
                for c in repo.checks.values()
                if c.head_sha == sha
            ]
            latest = {context: state for at, context, state in repo.statuses if at == sha}
            statuses = [
                {"__typename": "StatusContext", "context": context, "state": state.upper()}
                for context, state in latest.items()
                if state in STATUS_STATES
            ]
            if not runs and not statuses:
                return None
            page = {"hasNextPage": False, "endCursor": None}
            return {"contexts": lambda info, **_: {"pageInfo": page, "nodes": runs + statuses}}

        def commit(info, oid=None, **_):
            if oid is None or repo.git.git("cat-file", "-t", oid, check=False) != "commit":
                return None
            return {"__typename": "Commit", "statusCheckRollup": rollup(oid)}

        def pull_request(info, number, **_):
            pull = repo.pulls.get(number)
            if pull is None:
                raise Refusal(
                    f"Could not resolve to a PullRequest with the number of {number}.",
                    "NOT_FOUND",
                )
            entry = self.entry(repo, pull) if pull.queued else None
            return {"number": pull.number, "mergeQueueEntry": entry}

        return {"object": commit, "pullRequest": pull_request}

    def answer(self, body) -> tuple[dict, list[str]]:
        """GitHub's answer to one GraphQL request, and what in the request the schema or
        the stand-in does not allow (violations)."""
        if not isinstance(body, dict) or not isinstance(body.get("query"), str):
            return {"message": "Problems parsing JSON"}, ["a GraphQL request is {query, …}"]
        try:
            document = parse(body["query"])
        except GraphQLError as exc:
            return {"errors": [{"message": exc.message}]}, [f"GraphQL: {exc.message}"]
        errors = validate(schema(), document)
        if errors:
            return {"errors": [{"message": e.message} for e in errors]}, [
                f"GraphQL: {e.message}" for e in errors
            ]
        fields = [
            selection.name.value
            for definition in document.definitions
            for selection in definition.selection_set.selections
        ]
        unknown = [name for name in fields if name not in MUTATIONS]
        if unknown:
            return {"errors": [{"message": "not served"}]}, [
                f"GraphQL: the stand-in does not serve {', '.join(unknown)}"
            ]
        for name in fields:
            wanted = [MUTATIONS[name]] + ([("statuses", "read")] if name == "repository" else [])
            if not all(self.allowed(*permission) for permission in wanted):
                return {
                    "errors": [
                        {"type": "FORBIDDEN", "message": "Resource not accessible by integration"}
                    ]
                }, []
        root = {name: getattr(self, name) for name in MUTATIONS}
        result = execute(schema(), document, root_value=root, variable_values=body.get("variables"))
        answer: dict = {"data": result.data}
        if result.errors:
            answer["errors"] = [
                {
                    "type": (e.extensions or {}).get("type", "INTERNAL"),
                    "path": e.path,
                    "message": e.message,
                }
                for e in result.errors
            ]
            bad = [e.message for e in result.errors if not (e.extensions or {}).get("type")]
            return answer, [f"GraphQL execution: {m}" for m in bad]
        return answer, []
