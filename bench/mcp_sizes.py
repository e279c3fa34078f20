"""The size of each MCP tool's answer, in characters, on the demo project.

    uv run python bench/mcp_sizes.py

Seeds the demo project into a temporary SQLite database and calls every tool of the
agent-side server (``factory-mcp``) through the SDK's in-process client as the demo
agents (ada, alan) would, the server's API calls answered in process. Prints JSON.
"""

import asyncio
import json
import os
import secrets
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main():
    work = tempfile.mkdtemp(prefix="factory-mcp-sizes-")
    os.environ.update(
        DATABASE_URL=f"sqlite:///{work}/db.sqlite3", MEDIA_ROOT=f"{work}/media", LOG_LEVEL="WARNING"
    )
    # The production settings need a key; this one process keeps its own (unused) rate counts.
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
    os.environ.setdefault("FACTORY_SINGLE_PROCESS", "1")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "factory_site.settings")
    import django

    django.setup()
    import httpx
    from django.contrib.auth import get_user_model
    from django.core.handlers.wsgi import WSGIHandler
    from django.core.management import call_command
    from factory_client.client import FactoryClient
    from factory_client.mcp import AgentServer
    from knox.models import AuthToken
    from mcp import Client

    from tasks.models import Task

    call_command("migrate", verbosity=0)
    call_command("seed_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115
    users = get_user_model().objects
    alan, ada = users.get(username="alan"), users.get(username="ada")

    transport = httpx.WSGITransport(app=WSGIHandler())

    def server_for(user):
        """factory-mcp as the user, its API calls answered by the site in process."""
        token = AuthToken.objects.create(user=user)[1]
        client = FactoryClient("http://127.0.0.1", token, transport=transport, retries=0)
        return AgentServer(lambda: client, workspace=None)

    async def measure(server, calls):
        sizes = {}
        async with Client(server) as client:
            state = {}
            for name, arguments in calls:
                arguments = arguments(state) if callable(arguments) else arguments
                result = await client.call_tool(name, arguments)
                text = result.content[0].text if result.content else ""
                sizes[name] = {"chars": len(text), "error": result.is_error}
                if name == "claim_task" and not result.is_error:
                    state["attempt"] = json.loads(text)["attempt"]
        return sizes

    held = Task.objects.get(key="FM-3").current_attempt_id  # ada holds FM-3 in the demo
    sizes = asyncio.run(
        measure(
            server_for(ada),
            [
                ("get_context", {"task": "FM-3"}),
                ("get_task", {"task": "FM-1"}),
                ("search_decisions", {"q": "claim"}),
                ("heartbeat", {"attempt": held}),
                ("save_checkpoint", {"attempt": held, "data": {"step": "next"}, "revision": 1}),
                (
                    "attach_evidence",
                    {"attempt": held, "kind": "note", "content": "checked by hand"},
                ),
                (
                    "propose_decision",
                    {"attempt": held, "title": "T", "context": "C", "decision": "D"},
                ),
            ],
        )
    )
    sizes.update(
        asyncio.run(
            measure(
                server_for(alan),
                [
                    ("claim_task", {}),  # FM-6, the demo's one ready task
                    ("release_task", lambda s: {"attempt": s["attempt"], "reason": "measuring"}),
                    ("claim_task", {}),
                    (
                        "submit_attempt",
                        lambda s: {
                            "attempt": s["attempt"],
                            "summary": "done",
                            "commit": "abcdef1000000000000000000000000000000000",
                        },
                    ),
                ],
            )
        )
    )
    print(json.dumps(sizes, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
