"""ASGI entry point: the Django site, with the MCP server's streamable HTTP at /mcp.

    uvicorn factory_site.asgi:application          (or gunicorn -k uvicorn_worker.UvicornWorker)

Everything but /mcp goes to Django; /mcp and the lifespan go to the MCP app, which
authenticates with the same bearer tokens as the REST API.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "factory_site.settings")
django_application = get_asgi_application()

from factory_site.mcp import http_app  # noqa: E402  (needs Django set up)

mcp_application = http_app()


async def application(scope, receive, send):
    if (
        scope["type"] == "lifespan"
        or scope.get("path", "").rstrip("/") in ("/mcp",)
        or scope.get("path", "").startswith("/.well-known/oauth-protected-resource")
    ):
        await mcp_application(scope, receive, send)
    else:
        await django_application(scope, receive, send)
