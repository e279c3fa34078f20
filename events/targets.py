"""Where a webhook may be sent: http(s) only, and not inside our own network.

A target whose host resolves to a loopback, private, link-local or otherwise non-public
address is refused (a webhook must not become a way to reach the database or a cloud
metadata service), unless ``FACTORY_WEBHOOK_ALLOW_PRIVATE`` allows it: tests and
``make run`` do. The check runs when a subscription is saved and again before every try,
since a name may resolve elsewhere later.
"""

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings


def refusal(url: str) -> str | None:
    """Why ``url`` may not receive webhooks, or None when it may."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "not a valid URL"
    if parts.scheme not in ("http", "https"):
        return "must be an http:// or https:// URL"
    if not parts.hostname:
        return "must name a host"
    if parts.username or parts.password:
        return "must not carry credentials; commit statuses take a token instead"
    if settings.FACTORY_WEBHOOK_ALLOW_PRIVATE:
        return None
    try:
        infos = socket.getaddrinfo(parts.hostname, port or 443, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return f"the host {parts.hostname} does not resolve"
    for info in infos:
        address = ipaddress.ip_address(info[4][0].split("%", 1)[0])
        if not address.is_global or address.is_multicast:
            return (
                f"{parts.hostname} resolves to {address}, an address inside the network;"
                " webhooks go to public addresses only"
            )
    return None
