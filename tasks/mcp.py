"""Factory Memory as an MCP server: an agent's whole journey as tool calls.

The tools call the same services as the REST API, so the same rules hold (leases,
roles, idempotent submits, one error code per refusal). A refusal is a tool error
whose text starts with the API's code: ``lease_lost: the lease on …``.

Who is calling comes from a *principal* function: over stdio it is the owner of
``FACTORY_TOKEN``, over streamable HTTP the owner of the request's bearer token.
Answers are compact: keys, states and the few fields an agent acts on.
"""

import base64
import binascii
import functools
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.core.exceptions import ObjectDoesNotExist, ValidationError
from django.core.files.base import ContentFile, File
from django.db import close_old_connections
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, TextContent

from decisions import services as decision_services
from decisions.models import Decision
from decisions.selectors import search_decisions as find_decisions
from evidence import services as evidence_services
from evidence.models import Kind
from factory_site.auth import BearerTokenAuthentication
from factory_site.throttles import refused_authentication
from tasks import handoff, selectors, services
from tasks.errors import ServiceError
from tasks.models import Project, Task

INSTRUCTIONS = """\
Factory Memory keeps the durable record of a software factory. Work one task at a time:
claim_task gives you a task and an attempt under a lease; get_context gives you the spec,
its acceptance criteria and what each needs as proof, the decisions in force and why
earlier attempts ended. Heartbeat before the lease runs out, save_checkpoint so a
successor can resume, attach_evidence for each criterion, propose_decision for choices
the next worker must respect, then submit_attempt (or release_task). A refusal's text
starts with its code: lease_lost means your lease is gone; claim again.
"""

DEFAULT_CONTEXT_CHARS = 24_000


def user_for_token(token: str):
    """The active user a bearer token belongs to, or None (expired, revoked, unknown)."""
    from rest_framework.exceptions import AuthenticationFailed

    try:
        user, _ = BearerTokenAuthentication().authenticate_credentials(token.encode())
    except (AuthenticationFailed, UnicodeError):
        return None
    return user


class FactoryTokenVerifier:
    """Streamable HTTP: the same bearer tokens as the REST API (knox, stored hashed)."""

    async def verify_token(self, token: str) -> AccessToken | None:
        user = await sync_to_async(user_for_token, thread_sensitive=True)(token)
        if user is None:
            return None
        return AccessToken(
            token=token, client_id=str(user.pk), scopes=[], subject=user.get_username()
        )


def http_principal():
    from mcp.server.auth.middleware.auth_context import get_access_token

    access = get_access_token()
    if access is None:
        raise Refused("not_authenticated: send Authorization: Bearer <token>")
    return get_user_model().objects.get(pk=int(access.client_id), is_active=True)


class Refused(Exception):
    """A refusal to report as the tool's error, its text starting with the API's code."""


def _refusal(exc: Exception) -> Refused:
    if isinstance(exc, ServiceError):
        return Refused(f"{exc.code}: {exc.detail}")
    if isinstance(exc, ValidationError):
        fields = getattr(exc, "message_dict", None)
        if fields:
            return Refused(
                "invalid: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in fields.items())
            )
        return Refused("invalid: " + "; ".join(exc.messages))
    return Refused("not_found: not found, or not in one of your projects")


def refusing(fn):
    """Return a refusal as an error result whose text is exactly ``<code>: <reason>``.

    (A raised ToolError would reach the client prefixed "Error executing tool …".)
    """

    @functools.wraps(fn)
    def tool(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Refused as refusal:
            return CallToolResult(
                content=[TextContent(type="text", text=str(refusal))], is_error=True
            )

    return tool


def _call(fn: Callable[[], Any]) -> Any:
    """Run ``fn``, turning the services' refusals into tool errors with their codes."""
    close_old_connections()  # tools run in worker threads: honour CONN_MAX_AGE like a request
    try:
        return fn()
    except (ServiceError, ValidationError, ObjectDoesNotExist) as exc:
        raise _refusal(exc) from None


def _attempt(user, attempt_id: int):
    return selectors.attempt_for(user, attempt_id)


def _task(user, key: str) -> Task:
    return selectors.task_for(user, key)


def _when(value) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def build_server(principal: Callable[[], Any], *, local_files: bool, **http) -> MCPServer:
    """An MCP server whose tools act as ``principal()``.

    ``local_files`` lets attach_evidence read a path on this machine (stdio, where the
    agent and the server share a disk); over HTTP evidence is sent as content, and
    ``http`` carries the ``auth`` settings and the ``token_verifier``.
    """
    server = MCPServer(
        name="factory-memory",
        title="Factory Memory",
        version="1.0.0",
        instructions=INSTRUCTIONS,
        **http,
    )

    def tool(**options):
        return lambda fn: server.tool(**options)(refusing(fn))

    @tool(description="Claim the best claimable task (priority, then age) under a lease.")
    def claim_task(
        project: str | None = None,
        labels: list[str] | None = None,
        lease_seconds: int | None = None,
    ) -> dict:
        """project: only this project's tasks (slug); labels: tasks carrying all of these;
        lease_seconds: default 300. Returns the task and your attempt, or claimed=false."""
        user = principal()

        def claim():
            chosen = (
                Project.objects.get(pk__in=selectors.project_ids_for(user), slug=project)
                if project
                else None
            )
            return services.task_claim(
                agent=user, project=chosen, labels=labels or (), lease_seconds=lease_seconds
            )

        attempt = _call(claim)
        if attempt is None:
            return {"claimed": False, "reason": "nothing is claimable now"}
        task = attempt.task
        version = (
            f"{task.spec.key} v{attempt.spec_version.number}" if attempt.spec_version_id else None
        )
        return {
            "claimed": True,
            "task": task.key,
            "title": task.title,
            "attempt": attempt.pk,
            "number": attempt.number,
            "lease_expires_at": _when(attempt.lease_expires_at),
            "spec": version,
            "allowed_paths": task.allowed_paths,
        }

    @tool(
        description="The context bundle: task, pinned spec and criteria, decisions, earlier attempts, checkpoint."
    )
    def get_context(task: str, max_chars: int = DEFAULT_CONTEXT_CHARS) -> dict:
        """task: its key (FM-12). max_chars: a budget; the least relevant items are dropped
        first and the manifest says which."""
        user = principal()
        return _call(
            lambda: services.task_context(task=_task(user, task), actor=user, max_chars=max_chars)
        )

    @tool(description="Extend your lease. Fails with lease_lost once it has run out.")
    def heartbeat(attempt: int, lease_seconds: int | None = None) -> dict:
        user = principal()
        result = _call(
            lambda: services.attempt_heartbeat(
                attempt=_attempt(user, attempt), actor=user, lease_seconds=lease_seconds
            )
        )
        return {"attempt": result.pk, "lease_expires_at": _when(result.lease_expires_at)}

    @tool(
        description="Save what a successor needs to resume. revision: the one you last saw (0 first)."
    )
    def save_checkpoint(attempt: int, data: dict[str, Any], revision: int) -> dict:
        user = principal()
        result = _call(
            lambda: services.attempt_checkpoint_save(
                attempt=_attempt(user, attempt), actor=user, data=data, revision=revision
            )
        )
        return {
            "attempt": result.pk,
            "revision": result.checkpoint_revision,
            "saved_at": _when(result.checkpoint_at),
        }

    @tool(
        description=(
            "Attach evidence to your attempt: kind is one of junit, coverage, diff, log, screenshot, json, "
            "note, link. Give `path` (a file on this machine; stdio only) or `content` (text) or "
            "`content_base64` (bytes). criteria: the criterion keys it proves."
        )
    )
    def attach_evidence(
        attempt: int,
        kind: str,
        path: str | None = None,
        content: str | None = None,
        content_base64: str | None = None,
        name: str | None = None,
        criteria: list[str] | None = None,
    ) -> dict:
        user = principal()
        given = [value is not None for value in (path, content, content_base64)]
        if sum(given) != 1:
            raise Refused("invalid: give exactly one of path, content or content_base64")
        if kind not in Kind.values:
            raise Refused(f"invalid: kind must be one of {', '.join(Kind.values)}")
        if path is not None:
            if not local_files:
                raise Refused(
                    "invalid: paths are read only by the stdio server; send content instead"
                )
            file_path = Path(path).expanduser()
            if not file_path.is_file():
                raise Refused(f"invalid: no file at {path}")
            handle = file_path.open("rb")
            upload = File(handle, name=name or file_path.name)
        else:
            try:
                data = (
                    content.encode()
                    if content is not None
                    else base64.b64decode(content_base64, validate=True)
                )
            except (binascii.Error, ValueError):
                raise Refused("invalid: content_base64 is not base64") from None
            handle = None
            upload = ContentFile(data, name=name or f"{kind}.txt")
        try:
            evidence = _call(
                lambda: evidence_services.evidence_attach(
                    attempt=_attempt(user, attempt),
                    actor=user,
                    file=upload,
                    kind=kind,
                    criteria=criteria or (),
                )
            )
        finally:
            if handle is not None:
                handle.close()
        return {
            "id": evidence.pk,
            "kind": evidence.kind,
            "sha256": evidence.sha256,
            "size": evidence.size,
            "provenance": evidence.provenance,
            "authoritative": evidence.authoritative,
            "criteria": sorted(criteria or []),
        }

    @tool(description="Propose a decision the next worker must respect, during your attempt.")
    def propose_decision(
        attempt: int,
        title: str,
        context: str,
        decision: str,
        consequences: str = "",
        alternatives: list[dict[str, str]] | None = None,
    ) -> dict:
        """alternatives: [{"option": "...", "reason": "why not"}], the options you rejected."""
        user = principal()

        def propose():
            current = _attempt(user, attempt)
            return decision_services.decision_propose(
                project=current.task.project,
                actor=user,
                attempt=current,
                title=title,
                context=context,
                decision=decision,
                consequences=consequences,
                alternatives=alternatives or [],
            )

        record = _call(propose)
        return {"key": record.key, "state": record.state, "title": record.title}

    @tool(
        description="Submit your attempt for the gates. Safe to retry with the same idempotency_key."
    )
    def submit_attempt(
        attempt: int,
        summary: str,
        commit: str | None = None,
        branch: str | None = None,
        url: str | None = None,
        idempotency_key: str | None = None,
    ) -> dict:
        user = principal()
        change = {k: v for k, v in {"commit": commit, "branch": branch, "url": url}.items() if v}
        result = _call(
            lambda: services.attempt_submit(
                attempt=_attempt(user, attempt),
                actor=user,
                summary=summary,
                change=change,
                idempotency_key=(idempotency_key or "")[:255],
            )
        )
        return result.submit_receipt

    @tool(description="Give the task back, or with blocked=true mark it blocked (say why).")
    def release_task(attempt: int, reason: str = "", blocked: bool = False) -> dict:
        user = principal()
        result = _call(
            lambda: services.attempt_release(
                attempt=_attempt(user, attempt), actor=user, reason=reason, blocked=blocked
            )
        )
        return {"attempt": result.pk, "state": result.state, "task": result.task.key}

    @tool(
        description="A task's state and the four handoff answers (what changed, why, what is open, evidence)."
    )
    def get_task(task: str) -> dict:
        user = principal()
        found = _call(lambda: _task(user, task))
        answers = handoff.handoff(found)
        return {
            "key": found.key,
            "title": found.title,
            "state": found.state,
            "attempt": found.current_attempt_id,
            "what_changed": answers["what_changed"],
            "why": answers["why"],
            "what_remains_open": answers["what_remains_open"],
            "authoritative_evidence": [
                {"id": e["id"], "kind": e["kind"], "provenance": e["provenance"]}
                for e in answers["authoritative_evidence"]
            ],
        }

    @tool(
        description='Search decision records (words, "phrases", -exclusions); best match first, else newest.'
    )
    def search_decisions(
        q: str = "", state: str | None = None, project: str | None = None, limit: int = 10
    ) -> list[dict]:
        user = principal()
        found = Decision.objects.filter(project_id__in=selectors.project_ids_for(user))
        if project:
            found = found.filter(project__slug=project)
        if state:
            found = found.filter(state=state)
        found = find_decisions(found, q) if q else found.order_by("-number")
        return [
            {"key": d.key, "title": d.title, "state": d.state, "decision": d.decision[:300]}
            for d in found[: max(1, min(limit, 50))]
        ]

    @server.resource(
        "factory://tasks/{key}/context",
        mime_type="application/json",
        description="A task's context bundle.",
    )
    def task_context_resource(key: str) -> str:
        user = principal()
        return json.dumps(
            _call(lambda: services.task_context(task=_task(user, key), actor=user)), default=str
        )

    @server.resource(
        "factory://decisions/{key}", mime_type="application/json", description="A decision record."
    )
    def decision_resource(key: str) -> str:
        user = principal()
        record = _call(
            lambda: Decision.objects.filter(project_id__in=selectors.project_ids_for(user)).get(
                key=key
            )
        )
        return json.dumps(
            {
                "key": record.key,
                "title": record.title,
                "state": record.state,
                "context": record.context,
                "decision": record.decision,
                "consequences": record.consequences,
                "alternatives": record.alternatives,
                "supersedes": [d.key for d in record.supersedes.all()],
                "superseded_by": [d.key for d in record.superseded_by.all()],
                "specs": [s.key for s in record.specs.all()],
            }
        )

    return server


def http_app():
    """The streamable HTTP app served at /mcp (see factory_site/asgi.py)."""
    from django.conf import settings
    from mcp.server.auth.settings import AuthSettings
    from mcp.server.transport_security import TransportSecuritySettings

    site = settings.SITE_URL.rstrip("/")
    server = build_server(
        http_principal,
        local_files=False,
        # The tokens are this site's own (issue_token), checked by the verifier, not by OAuth.
        auth=AuthSettings(
            issuer_url=site, resource_server_url=f"{site}/mcp", validate_token_resource=False
        ),
        token_verifier=FactoryTokenVerifier(),
    )
    hosts = [h for h in settings.ALLOWED_HOSTS if h != "*"]
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection="*" not in settings.ALLOWED_HOSTS,
        allowed_hosts=[*hosts, *(f"{h}:*" for h in hosts)],
        allowed_origins=[site, *settings.CSRF_TRUSTED_ORIGINS],
    )
    return RefusalLimit(
        server.streamable_http_app(
            streamable_http_path="/mcp", transport_security=security, stateless_http=True
        )
    )


class RefusalLimit:
    """ASGI wrapper: /mcp's refused calls count against the caller's address like the API's.

    The SDK answers a missing or bad bearer token with 401 before any tool runs; each
    such answer is counted (``factory_site.throttles.refused_authentication``, the same
    counts as the REST API's) and past the limit replaced by 429 ``throttled`` with
    ``Retry-After``.
    """

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        refused = False

        async def counted_send(message):
            nonlocal refused
            if message["type"] == "http.response.start" and message["status"] == 401:
                wait = await sync_to_async(_count_refusal)(scope)
                if wait:
                    refused = True
                    await _send_throttled(send, wait)
                    return
            if not refused:  # the 401's body is dropped with its head
                await send(message)

        await self.app(scope, receive, counted_send)


def _count_refusal(scope) -> int | None:
    from django.contrib.auth.models import AnonymousUser
    from django.core.handlers.asgi import ASGIRequest

    request = ASGIRequest(scope, io.BytesIO())  # Django's own META from the scope
    request.user = AnonymousUser()
    has_token = "HTTP_AUTHORIZATION" in request.META
    return refused_authentication(request, credentials=has_token)


async def _send_throttled(send, wait: int) -> None:
    body = json.dumps(
        {
            "detail": f"Request was throttled. Expected available in {wait} seconds.",
            "code": "throttled",
            "retry_after": wait + 1,  # as the REST API answers
        }
    ).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(wait).encode()),
    ]
    await send({"type": "http.response.start", "status": 429, "headers": headers})
    await send({"type": "http.response.body", "body": body})
