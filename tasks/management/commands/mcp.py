import os

from django.core.management.base import BaseCommand, CommandError

from tasks.mcp import build_server, user_for_token


class Command(BaseCommand):
    help = (
        "Run the Factory Memory MCP server over stdio, acting as the owner of the token in "
        "FACTORY_TOKEN (issue one with issue_token)."
    )

    def handle(self, *args, **options):
        token = os.environ.get("FACTORY_TOKEN", "").strip()
        if not token:
            raise CommandError(
                "set FACTORY_TOKEN to an API token (python manage.py issue_token USERNAME)"
            )
        user = user_for_token(token)
        if user is None:
            raise CommandError("FACTORY_TOKEN is not a valid token: unknown, expired or revoked")
        # stdout carries the protocol: nothing else may be printed there.
        build_server(lambda: user, local_files=True).run("stdio")
