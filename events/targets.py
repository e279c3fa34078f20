"""Where a webhook may be sent, and how it is connected to.

A target must be http(s) and must not lead inside our own network: a host that resolves
to a loopback, private, link-local or otherwise non-public address is refused (a webhook
must not become a way to reach the database or a cloud metadata service), unless
``FACTORY_WEBHOOK_ALLOW_PRIVATE`` allows it: tests and ``make run`` do.

``refusal`` is the check when a subscription is saved. ``checked`` runs again before
every try, since a name may resolve elsewhere later, and ``client`` connects to exactly
the addresses that check answered: a name that answers a public address to the check
and 127.0.0.1 to a second lookup (DNS rebinding) is never looked up a second time. The
URL keeps its host name, so the Host header, TLS's SNI and the certificate's check are
for the name, as if no pin were there.
"""

import re
import time
from urllib.parse import urlsplit

import httpcore
import httpx
from django.conf import settings

from projects.addresses import AddressRefused, Checked, resolve

# What a target looks like, written once for the check below and the API's schema: http(s),
# a host name or IPv4 address, a port from 1 to 65535, then any path without spaces.
_HOST = r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,250}[A-Za-z0-9])?"
_PORT = (
    r"(?::(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}"
    r"|[1-9][0-9]{0,3}))?"
)
# Whitespace written out: Python's \s (the check) also takes \x1c-\x1f, \x85 and Unicode's
# spaces, which a schema's ECMA \s leaves out.
_NOT_SPACE = r"[^\u0000-\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
URL_PATTERN = rf"^https?://{_HOST}{_PORT}(?:[/?#]{_NOT_SPACE}*)?$"
MAX_URL = 2000


def _shape_refusal(url: str) -> str | None:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (a port out of range raises here)
    except ValueError:
        return "not a valid URL"
    if parts.scheme not in ("http", "https"):
        return "must be an http:// or https:// URL"
    if parts.username or parts.password:
        return "must not carry credentials; commit statuses take a token instead"
    if len(url) > MAX_URL or not re.fullmatch(URL_PATTERN, url):
        return "must be http(s)://host[:port][/path], with no spaces"
    return None


def checked(url: str) -> Checked:
    """The URL's host and port with the addresses it resolves to now, each one allowed
    (any address when ``FACTORY_WEBHOOK_ALLOW_PRIVATE``), or ``AddressRefused`` saying why."""
    why = _shape_refusal(url)
    if why:
        raise AddressRefused(why)
    parts = urlsplit(url)
    return resolve(
        parts.hostname,
        parts.port or (443 if parts.scheme == "https" else 80),
        allow_private=settings.FACTORY_WEBHOOK_ALLOW_PRIVATE,
        what="webhooks",
    )


def refusal(url: str) -> str | None:
    """Why ``url`` may not receive webhooks, or None when it may (the check on save).

    With ``FACTORY_WEBHOOK_ALLOW_PRIVATE`` only the URL's shape is checked: a name that
    does not resolve yet may be saved, and its tries fail until it does.
    """
    if settings.FACTORY_WEBHOOK_ALLOW_PRIVATE:
        return _shape_refusal(url)
    try:
        checked(url)
    except AddressRefused as exc:
        return str(exc)
    return None


class _Deadline(httpcore.NetworkStream):
    """A connection that ends at a deadline, however slowly the other side trickles:
    each read and write waits at most until then."""

    def __init__(self, stream: httpcore.NetworkStream, deadline: float):
        self._stream, self._deadline = stream, deadline

    def _left(self, timeout: float | None, error) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise error("the try's time is up")
        return left if timeout is None else min(timeout, left)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, self._left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, self._left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context, server_hostname=None, timeout=None):
        stream = self._stream.start_tls(
            ssl_context, server_hostname, self._left(timeout, httpcore.ConnectTimeout)
        )
        return _Deadline(stream, self._deadline)

    def get_extra_info(self, info: str):
        return self._stream.get_extra_info(info)


class _Pinned(httpcore.NetworkBackend):
    """Connects the checked host to its checked addresses only, in the order resolved."""

    def __init__(self, target: Checked, deadline: float):
        self._target, self._deadline = target, deadline
        self._direct = httpcore.SyncBackend()

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        if (host.lower(), port) != (self._target.host.lower(), self._target.port):
            raise httpcore.ConnectError(f"{host}:{port} was not checked")
        failed = httpcore.ConnectError(f"{host} has no address")
        for address in self._target.addresses:
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise httpcore.ConnectTimeout("the try's time is up")
            try:
                stream = self._direct.connect_tcp(
                    address,
                    port,
                    timeout=left if timeout is None else min(timeout, left),
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except httpcore.ConnectError as exc:  # refused: the next address may answer
                failed = exc
            else:
                return _Deadline(stream, self._deadline)
        raise failed


class _PinnedTransport(httpx.HTTPTransport):
    def __init__(self, target: Checked, seconds: float):
        # Verified against certifi's CAs (or SSL_CERT_FILE) and the URL's host name.
        tls = httpx.create_ssl_context()
        super().__init__(verify=tls)
        # httpx 0.28 takes no network backend, so its pool is built again with ours.
        self._pool = httpcore.ConnectionPool(
            ssl_context=tls, network_backend=_Pinned(target, time.monotonic() + seconds)
        )


def client(target: Checked, *, seconds: float) -> httpx.Client:
    """An HTTP client that reaches ``target``'s host at its checked addresses only, and
    whose connections end ``seconds`` from now whatever the other side does. No proxy
    from the environment: a proxy would look the name up again."""
    return httpx.Client(
        transport=_PinnedTransport(target, seconds),
        timeout=seconds,
        follow_redirects=False,
        trust_env=False,
    )
