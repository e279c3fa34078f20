"""The site's MCP endpoint, ``/mcp`` over streamable HTTP: the agents' own server, hosted.

It is ``factory_client.mcp``'s server, the one agents run themselves as
``factory-mcp``, whose tools call the REST API; here each call goes to this site's
Django application in process, with the bearer token the MCP request came with. So
the endpoint has no rules of its own: the API's authentication, roles, leases,
throttles and error codes are the ones that apply. It reads no local files.
"""

import io
import json

import httpx
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.wsgi import get_wsgi_application
from factory_client.client import FactoryClient
from factory_client.mcp import AgentServer, Refused
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import TransportSecuritySettings
from rest_framework.exceptions import AuthenticationFailed

from projects.auth import BearerTokenAuthentication
from projects.throttles import refused_authentication


def user_for_token(token: str):
    """The active user a bearer token belongs to, or None (expired, revoked, unknown)."""
    try:
        user, _ = BearerTokenAuthentication().authenticate_credentials(token.encode())
    except (AuthenticationFailed, UnicodeError):
        return None
    return user


class FactoryTokenVerifier:
    """The same bearer tokens as the REST API (knox, stored hashed)."""

    async def verify_token(self, token: str) -> AccessToken | None:
        user = await sync_to_async(user_for_token, thread_sensitive=True)(token)
        if user is None:
            return None
        return AccessToken(
            token=token, client_id=str(user.pk), scopes=[], subject=user.get_username()
        )


def in_process_client(django=None) -> callable:
    """``api()`` for the tools: a client of this site's API, as the MCP request's caller."""
    transport = httpx.WSGITransport(app=django or get_wsgi_application())

    def api() -> FactoryClient:
        access = get_access_token()
        if access is None:
            raise Refused("not_authenticated: send Authorization: Bearer <token>")
        # SITE_URL gives the Host the API expects and its scheme (https behind TLS).
        return FactoryClient(url=settings.SITE_URL, token=access.token, transport=transport)

    return api


def http_app():
    """The streamable HTTP app served at /mcp (see factory_site/asgi.py)."""
    site = settings.SITE_URL.rstrip("/")
    server = AgentServer(
        in_process_client(),
        workspace=None,
        no_files="paths are read only by the agent-side server (factory-mcp --workspace DIR);"
        " send content instead",
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
    such answer is counted (``projects.throttles.refused_authentication``, the same
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
