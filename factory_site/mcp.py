"""The site's MCP endpoint, ``/mcp`` over streamable HTTP: the agents' own server, hosted.

It is ``factory_client.mcp``'s server, the one agents run themselves as
``factory-mcp``, whose tools call the REST API; here each call goes to this site's
Django application in process, with the bearer token the MCP request came with. So
the endpoint has no rules of its own: the API's authentication, roles, leases,
throttles and error codes are the ones that apply. It reads no local files.
"""

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

from factory_site.auth import BearerTokenAuthentication


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
    return server.streamable_http_app(
        streamable_http_path="/mcp", transport_security=security, stateless_http=True
    )
