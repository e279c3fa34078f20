"""Serve the test provider: ``python -m tests.oidc_provider.serve``.

Generates the RS256 key, makes the tables in the SQLite file named by ``PROVIDER_DATABASE``
and the users (``PASSWORD`` for all); then reads the site's redirect URI as a line on its
input (so a test can start it before its live server is up), creates the site's
confidential client (``CLIENT_ID``, ``CLIENT_SECRET``, consent skipped, that redirect URI
only) and serves on a free port of 127.0.0.1, which it prints as its first line, until it
is stopped.
"""

import os
import sys
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

CLIENT_ID, CLIENT_SECRET = "factory", "factory-secret"
PASSWORD = "provider-pw"
# username: (email, groups)
USERS = {
    "nora": ("nora@example.test", ["factory-managers", "staff"]),
    "gus": ("gus@example.test", ["visitors"]),
}


class ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a browser's idle connection must not hold the next request up


class QuietHandler(WSGIRequestHandler):
    def log_message(self, *args):
        pass


def build_users() -> None:
    from django.contrib.auth.models import Group, User

    for username, (email, groups) in USERS.items():
        user = User.objects.create_user(username, email=email, password=PASSWORD)
        user.groups.set(Group.objects.get_or_create(name=name)[0] for name in groups)


def build_client(redirect_uri: str) -> None:
    from oauth2_provider.models import Application

    Application.objects.create(
        name="Factory Memory",
        client_id=CLIENT_ID,
        client_secret=CLIENT_SECRET,
        client_type=Application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=redirect_uri,
        algorithm=Application.RS256_ALGORITHM,
        skip_authorization=True,
    )


def main() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    os.environ["PROVIDER_RSA_KEY"] = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.oidc_provider.settings"

    import django
    from django.core.management import call_command
    from django.core.wsgi import get_wsgi_application

    django.setup()
    call_command("migrate", run_syncdb=True, verbosity=0)
    build_users()
    build_client(sys.stdin.readline().strip())
    server = make_server(
        "127.0.0.1", 0, get_wsgi_application(), ThreadingServer, handler_class=QuietHandler
    )
    print(server.server_port, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
