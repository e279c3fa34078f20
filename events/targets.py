"""Where a webhook may be sent: http(s) only, and not inside our own network.

A target whose host resolves to a loopback, private, link-local or otherwise non-public
address is refused (a webhook must not become a way to reach the database or a cloud
metadata service), unless ``FACTORY_WEBHOOK_ALLOW_PRIVATE`` allows it: tests and
``make run`` do. The check runs when a subscription is saved and again before every try,
since a name may resolve elsewhere later.
"""

import re
from urllib.parse import urlsplit

from django.conf import settings

from projects.addresses import AddressRefused, resolve

# What a target looks like, written once for the check below and the API's schema: http(s),
# a host name or IPv4 address, a port from 1 to 65535, then any path without spaces.
_HOST = r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,250}[A-Za-z0-9])?"
_PORT = (
    r"(?::(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}"
    r"|[1-9][0-9]{0,3}))?"
)
URL_PATTERN = rf"^https?://{_HOST}{_PORT}(?:[/?#][^\s\u0000]*)?$"
MAX_URL = 2000


def refusal(url: str) -> str | None:
    """Why ``url`` may not receive webhooks, or None when it may."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "not a valid URL"
    if parts.scheme not in ("http", "https"):
        return "must be an http:// or https:// URL"
    if parts.username or parts.password:
        return "must not carry credentials; commit statuses take a token instead"
    if len(url) > MAX_URL or not re.fullmatch(URL_PATTERN, url):
        return "must be http(s)://host[:port][/path], with no spaces"
    if settings.FACTORY_WEBHOOK_ALLOW_PRIVATE:
        return None
    try:
        resolve(
            parts.hostname,
            port or (443 if parts.scheme == "https" else 80),
            allow_private=False,
            what="webhooks",
        )
    except AddressRefused as exc:
        return str(exc)
    return None
