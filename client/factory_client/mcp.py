"""``factory-mcp``: Factory Memory's MCP server for agents, a client of the HTTP API.

It runs beside the agent, over stdio, and needs only ``FACTORY_URL`` and
``FACTORY_TOKEN``: no database, no settings, no code of the server. Every tool is
one or two calls of the REST API through ``FactoryClient``, so the same rules hold
(leases, roles, idempotent submits) and a refusal is a tool error whose text starts
with the API's code: ``lease_lost: the lease on …``. The site serves the same
server at ``/mcp`` over streamable HTTP (``factory_site/mcp.py``).

``attach_evidence`` reads a local file only from under the workspace directory
named at start (``--workspace``), never through a symlink that leads out of it.

    factory-mcp --workspace /path/to/checkout
"""

from __future__ import annotations

import argparse
import base64
import binascii
import functools
import io
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent

from factory_client import files, instructions
from factory_client.client import FactoryClient, FactoryError

INSTRUCTIONS = """\
Factory Memory keeps the durable record of a software factory. Work one task at a time:
claim_task gives you a task and an attempt under a lease; get_context gives you the spec,
its acceptance criteria and what each needs as proof, the decisions in force and why
earlier attempts ended. Heartbeat before the lease runs out, save_checkpoint so a
successor can resume, attach_evidence for each criterion, propose_decision for choices
the next worker must respect, then submit_attempt (or release_task); wait_for_task with
until=["in_review", "ready", "failed"] waits for the gates' verdict. A refusal's text
starts with its code: lease_lost means your lease is gone; claim again.
"""

DEFAULT_CONTEXT_CHARS = 24_000
MAX_WAIT_SECONDS = 600  # a tool call held open longer outlives most clients' patience
KINDS = ("junit", "coverage", "diff", "log", "screenshot", "json", "note", "link")


class Refused(Exception):
    """A refusal to report as the tool's error, its text starting with the API's code."""


class AgentServer(MCPServer):
    """An MCP server whose tools act through ``api()``, a ``FactoryClient`` for the caller.

    ``workspace`` is the directory files may be attached from (None: no local files);
    ``no_files`` is what a caller who sends a ``path`` is told when there is none.
    """

    def __init__(
        self,
        api: Callable[[], FactoryClient],
        *,
        workspace: Path | None,
        no_files: str = "this server reads no local files (start factory-mcp with --workspace DIR);"
        " send content instead",
        **options,
    ):
        super().__init__(
            name="factory-memory",
            title="Factory Memory",
            version="2.0.0",
            instructions=INSTRUCTIONS,
            **options,
        )
        self.api = api
        self.workspace = workspace.resolve(strict=True) if workspace is not None else None
        self.no_files = no_files
        for tool, description in TOOLS:
            self.add_tool(refusing(tool), description=description)
        self.resource(
            "factory://tasks/{key}/context",
            mime_type="application/json",
            description="A task's context bundle.",
        )(task_context_resource)
        self.resource(
            "factory://decisions/{key}",
            mime_type="application/json",
            description="A decision record.",
        )(decision_resource)
        self.prompt(
            name="work_through_factory_memory",
            title="Work through Factory Memory",
            description="How work is done in a repository that uses Factory Memory: the "
            "section `factory init` writes into AGENTS.md, CLAUDE.md and GEMINI.md.",
        )(work_through_factory_memory)


def refusing(fn):
    """Return a refusal as an error result whose text is exactly ``<code>: <reason>``.

    (A raised ToolError would reach the client prefixed "Error executing tool …".)
    """

    @functools.wraps(fn)
    def tool(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (Refused, FactoryError) as refusal:
            return CallToolResult(
                content=[TextContent(type="text", text=str(refusal))], is_error=True
            )

    return tool


def _api(ctx: Context) -> FactoryClient:
    return ctx.mcp_server.api()


# --- the tools, one function each ------------------------------------------------------------


def claim_task(
    ctx: Context,
    project: str | None = None,
    labels: list[str] | None = None,
    lease_seconds: int | None = None,
) -> dict:
    """project: only this project's tasks (slug); labels: tasks carrying all of these;
    lease_seconds: default 300. Returns the task and your attempt, or claimed=false."""
    claimed = _api(ctx).claim(project=project, labels=labels or (), lease_seconds=lease_seconds)
    if claimed is None:
        return {"claimed": False, "reason": "nothing is claimable now"}
    task, attempt = claimed["task"], claimed["attempt"]
    version = attempt.get("spec_version")
    return {
        "claimed": True,
        "task": task["key"],
        "title": task["title"],
        "attempt": attempt["id"],
        "number": attempt["number"],
        "lease_expires_at": attempt["lease_expires_at"],
        "spec": f"{version['spec']} v{version['number']}" if version else None,
        "allowed_paths": task["allowed_paths"],
    }


def get_context(
    ctx: Context,
    task: str,
    max_chars: int = DEFAULT_CONTEXT_CHARS,
    format: Literal["json", "markdown"] = "json",
) -> Any:  # dict or str; a union would make the SDK wrap the JSON answer in {"result": …}
    """task: its key (FM-12). max_chars: a budget; the least relevant items are dropped
    first and the manifest says which. format: "markdown" answers the brief, the same
    material as concise Markdown, its footer naming the bundle's hash and what was dropped."""
    if format == "markdown":
        return _api(ctx).brief(task, max_chars=max_chars)
    return _api(ctx).context(task, max_chars=max_chars)


def heartbeat(
    ctx: Context, attempt: int, lease_seconds: int | None = None, usage: dict | None = None
) -> dict:
    """usage: what you used since your last report, added once to the attempt's totals:
    {"model": "…", "input_tokens": 0, "output_tokens": 0, "cost_usd": "0.0125",
    "wall_seconds": 60}, each optional. Fails with budget_exhausted when it reaches the
    task's budget: the attempt has ended."""
    lease = _api(ctx).heartbeat(attempt, lease_seconds=lease_seconds, usage=usage)
    return {"attempt": lease["attempt"], "lease_expires_at": lease["lease_expires_at"]}


def save_checkpoint(ctx: Context, attempt: int, data: dict[str, Any], revision: int) -> dict:
    saved = _api(ctx).save_checkpoint(attempt, data, revision)
    return {"attempt": attempt, "revision": saved["revision"], "saved_at": saved["saved_at"]}


def attach_evidence(
    ctx: Context,
    attempt: int,
    kind: str,
    path: str | None = None,
    content: str | None = None,
    content_base64: str | None = None,
    name: str | None = None,
    criteria: list[str] | None = None,
) -> dict:
    server = ctx.mcp_server
    if sum(value is not None for value in (path, content, content_base64)) != 1:
        raise Refused("invalid: give exactly one of path, content or content_base64")
    if kind not in KINDS:
        raise Refused(f"invalid: kind must be one of {', '.join(KINDS)}")
    if path is not None:
        if server.workspace is None:
            raise Refused(f"invalid: {server.no_files}")
        handle = open_in_workspace(server.workspace, path)
        name = name or Path(path).name
    else:
        try:
            data = (
                content.encode()
                if content is not None
                else base64.b64decode(content_base64, validate=True)
            )
        except (binascii.Error, ValueError):
            raise Refused("invalid: content_base64 is not base64") from None
        handle, name = io.BytesIO(data), name or f"{kind}.txt"
    with handle:
        stored = _api(ctx).evidence(attempt, handle, kind, criteria=criteria or (), name=name)
    return {
        "id": stored["id"],
        "kind": stored["kind"],
        "sha256": stored["sha256"],
        "size": stored["size"],
        "provenance": stored["provenance"],
        "authoritative": stored["authoritative"],
        "criteria": sorted(stored["criteria"]),
    }


def propose_decision(
    ctx: Context,
    attempt: int,
    title: str,
    context: str,
    decision: str,
    consequences: str = "",
    alternatives: list[dict[str, str]] | None = None,
) -> dict:
    """alternatives: [{"option": "...", "reason": "why not"}], the options you rejected."""
    record = _api(ctx).decide(
        attempt,
        title,
        context,
        decision,
        consequences=consequences,
        alternatives=alternatives or [],
    )
    return {"key": record["key"], "state": record["state"], "title": record["title"]}


def submit_attempt(
    ctx: Context,
    attempt: int,
    summary: str,
    commit: str | None = None,
    branch: str | None = None,
    url: str | None = None,
    idempotency_key: str | None = None,
    usage: dict | None = None,
) -> dict:
    """commit: the full id of the commit to verify (`git rev-parse HEAD`; a short id is
    refused); usage: what you used since your last heartbeat, as heartbeat takes it."""
    change = {k: v for k, v in {"commit": commit, "branch": branch, "url": url}.items() if v}
    return _api(ctx).submit(attempt, summary, change, idempotency_key=idempotency_key, usage=usage)


def release_task(ctx: Context, attempt: int, reason: str = "", blocked: bool = False) -> dict:
    released = _api(ctx).release(attempt, reason=reason, blocked=blocked)
    return {"attempt": released["id"], "state": released["state"], "task": released["task"]}


def get_task(ctx: Context, task: str) -> dict:
    api = _api(ctx)
    found, answers = api.task(task), api.handoff(task)
    attempt = api.attempt(found["current_attempt"]) if found.get("current_attempt") else {}
    return {
        "key": found["key"],
        "title": found["title"],
        "state": found["state"],
        "attempt": found["current_attempt"],
        "landed_commit": found.get("landed_commit", ""),
        "landing": attempt.get("landing"),
        "what_changed": answers["what_changed"],
        "why": answers["why"],
        "what_remains_open": answers["what_remains_open"],
        "authoritative_evidence": [
            {"id": e["id"], "kind": e["kind"], "provenance": e["provenance"]}
            for e in answers["authoritative_evidence"]
        ],
        "runner": attempt.get("runner"),
    }


def wait_for_task(ctx: Context, key: str, until: list[str], timeout_seconds: float = 60) -> dict:
    """key: the task (FM-12); until: the states to wait for (in_review, done, ready, failed,
    …); timeout_seconds: at most 600."""
    seconds = max(0.0, min(float(timeout_seconds), MAX_WAIT_SECONDS))
    task = _api(ctx).wait_for_task(key, until, seconds)
    return {
        "key": task["key"],
        "title": task["title"],
        "state": task["state"],
        "attempt": task["current_attempt"],
    }


def search_decisions(
    ctx: Context, q: str = "", state: str | None = None, project: str | None = None, limit: int = 10
) -> list[dict]:
    found = _api(ctx).decisions(q=q, state=state, project=project, limit=max(1, min(limit, 50)))
    return [
        {"key": d["key"], "title": d["title"], "state": d["state"], "decision": d["decision"][:300]}
        for d in found
    ]


TOOLS = [
    (claim_task, "Claim the best claimable task (priority, then age) under a lease."),
    (
        get_context,
        "The context bundle: task, pinned spec and criteria, decisions, earlier attempts, "
        'checkpoint; format="markdown" gives the same as a concise Markdown brief.',
    ),
    (heartbeat, "Extend your lease. Fails with lease_lost once it has run out."),
    (
        save_checkpoint,
        "Save what a successor needs to resume. revision: the one you last saw (0 first).",
    ),
    (
        attach_evidence,
        "Attach evidence to your attempt: kind is one of junit, coverage, diff, log, screenshot, "
        "json, note, link. Give `path` (a file under the workspace this server was started "
        "with), `content` (text) or `content_base64` (bytes). criteria: the criterion keys it "
        "proves.",
    ),
    (propose_decision, "Propose a decision the next worker must respect, during your attempt."),
    (
        submit_attempt,
        "Submit your attempt for the gates. Safe to retry with the same idempotency_key.",
    ),
    (release_task, "Give the task back, or with blocked=true mark it blocked (say why)."),
    (
        get_task,
        "A task's state and the four handoff answers (what changed, why, what is open, evidence).",
    ),
    (
        wait_for_task,
        "Wait until a task is in one of the states `until`, then answer its state; a tool "
        "error starting with timeout: if it is not within timeout_seconds.",
    ),
    (
        search_decisions,
        'Search decision records (words, "phrases", -exclusions); best match first, else newest.',
    ),
]


def work_through_factory_memory() -> str:
    return instructions.SECTION


def task_context_resource(key: str, ctx: Context) -> str:
    return json.dumps(_api(ctx).context(key))


def decision_resource(key: str, ctx: Context) -> str:
    record = _api(ctx).decision(key)
    fields = ("key", "title", "state", "context", "decision", "consequences", "alternatives")
    return json.dumps(
        {
            **{name: record[name] for name in fields},
            "supersedes": record["supersedes"],
            "superseded_by": record["superseded_by"],
            "specs": record["specs"],
        }
    )


# --- files from the workspace --------------------------------------------------------------


def open_in_workspace(workspace: Path, path: str) -> BinaryIO:
    """Open a regular file under ``workspace`` for reading, or refuse.

    ``path`` is relative to the workspace or absolute. Symlinks are resolved first and
    the real path must still lie under the workspace; the file is then opened one
    directory at a time from the workspace without following links (``files.open_read``),
    so a symlink swapped in after the check cannot lead the open elsewhere. Devices,
    FIFOs, directories and files with a second (hard) name are refused.
    """
    candidate = Path(path).expanduser()
    if not candidate.is_absolute():
        candidate = workspace / candidate
    real = Path(os.path.realpath(candidate))
    if real != workspace and workspace not in real.parents:
        raise Refused(f"invalid: {path} is outside the workspace {workspace}")
    if real == workspace:
        raise Refused(f"invalid: {path} is a directory, not a file")
    try:
        return files.open_read(workspace, real.relative_to(workspace).as_posix())
    except (FileNotFoundError, NotADirectoryError):
        raise Refused(f"invalid: no file at {path}") from None
    except files.UnsafePath as exc:
        if exc.why == "is not a regular file":
            raise Refused(f"invalid: {path} is not a regular file") from None
        raise Refused(f"invalid: {path} cannot be read safely: {exc}") from None
    except OSError as exc:
        raise Refused(f"invalid: {path} cannot be read safely ({exc.strerror})") from None


# --- the command ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="factory-mcp",
        description="Factory Memory's MCP server over stdio, acting as the owner of FACTORY_TOKEN"
        " against the API at FACTORY_URL.",
    )
    parser.add_argument(
        "--workspace",
        type=Path,
        help="the directory evidence files may be attached from by path (default: none)",
    )
    parser.add_argument("--url", help="the site (default: $FACTORY_URL)")
    args = parser.parse_args(argv)
    try:
        client = FactoryClient(url=args.url)
    except FactoryError as exc:
        print(f"factory-mcp: {exc}", file=sys.stderr)
        return 2
    if args.workspace is not None and not args.workspace.is_dir():
        print(f"factory-mcp: --workspace {args.workspace} is not a directory", file=sys.stderr)
        return 2
    # stdout carries the protocol: nothing else may be printed there.
    AgentServer(lambda: client, workspace=args.workspace).run("stdio")
    return 0


if __name__ == "__main__":
    sys.exit(main())
