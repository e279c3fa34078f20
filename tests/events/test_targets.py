"""A webhook goes where it was checked to go: the addresses the check resolved are the
ones connected to (a name that answers differently the second time reaches nothing
else), TLS still checks the host's name, and what a failed answer leaves behind is short.

Nothing here leaves the machine: the one public address a test names is refused by a
guard on ``socket.create_connection`` before any packet is sent."""

import contextlib
import datetime
import socket
import ssl
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from events import services
from events.models import Delivery
from tests.serving import serve_in_thread

PUBLIC = "93.184.216.34"
NAME = "hooks.example.com"


class Answering:
    """A server on 127.0.0.1 whose POST answer is ``answer(handler)``; keeps each
    request's Host header and, over TLS, the name the client asked for (SNI)."""

    def __init__(self, answer, tls: ssl.SSLContext | None = None):
        self.hosts, self.names = [], []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length", 0)))
                server.hosts.append(self.headers["host"])
                with contextlib.suppress(OSError):  # the client may hang up: it is told to
                    answer(self)

            def log_message(self, *args):
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        if tls is not None:
            tls.sni_callback = lambda sock, name, context: self.names.append(name)
            self.http.socket = tls.wrap_socket(self.http.socket, server_side=True)
        self.port = self.http.server_address[1]
        serve_in_thread(self.http)

    def stop(self):
        self.http.shutdown()
        self.http.server_close()


def no_content(handler):
    handler.send_response(204)
    handler.send_header("Content-Length", "0")
    handler.end_headers()


@pytest.fixture
def lookups(monkeypatch):
    """``lookups.answers[name]``: the addresses each lookup of ``name`` answers in turn
    (the last one from then on); ``lookups.calls``: the names looked up. Other names
    resolve as usual."""

    class Lookups:
        answers: dict[str, list[str]] = {}
        calls: list[str] = []

    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if host not in Lookups.answers:
            return real(host, port, *args, **kwargs)
        Lookups.calls.append(host)
        queue = Lookups.answers[host]
        address = queue.pop(0) if len(queue) > 1 else queue[0]
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    Lookups.answers, Lookups.calls = {}, []
    return Lookups


@pytest.fixture
def dialled(monkeypatch):
    """The addresses connections were opened to; the public one is refused before any
    packet is sent, so no test reaches past this machine."""
    calls = []
    real = socket.create_connection

    def create_connection(address, *args, **kwargs):
        calls.append(address)
        if address[0] == PUBLIC:
            raise ConnectionRefusedError(f"the test refuses {PUBLIC}")
        return real(address, *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", create_connection)
    return calls


def deliver(flow, url, django_capture_on_commit_callbacks) -> Delivery:
    services.subscription_create(
        project=flow.project, actor=flow.manager, url=url, types=["task.published"]
    )
    with django_capture_on_commit_callbacks(execute=True):
        flow.ready()
    return Delivery.objects.get()


def test_a_name_that_rebinds_to_loopback_is_connected_at_the_address_checked(
    flow, receiver, lookups, dialled, settings, django_capture_on_commit_callbacks
):
    port = receiver.server.server_address[1]
    lookups.answers[NAME] = [PUBLIC, "127.0.0.1"]
    services.subscription_create(  # saved while private targets are allowed: no lookup
        project=flow.project, actor=flow.manager, url=f"http://{NAME}:{port}/hook"
    )
    settings.FACTORY_WEBHOOK_ALLOW_PRIVATE = False

    with django_capture_on_commit_callbacks(execute=True):
        flow.ready()

    delivery = Delivery.objects.get()
    assert receiver.requests == []
    assert lookups.calls == [NAME]
    assert dialled == [(PUBLIC, port)]
    assert (delivery.status, delivery.last_code) == ("pending", None)
    assert delivery.last_error == f"ConnectError: the test refuses {PUBLIC}"


def test_a_named_target_is_reached_at_its_address_and_keeps_its_name(
    flow, lookups, dialled, django_capture_on_commit_callbacks
):
    server = Answering(no_content)
    lookups.answers[NAME] = ["127.0.0.1"]

    delivery = deliver(flow, f"http://{NAME}:{server.port}/", django_capture_on_commit_callbacks)

    server.stop()
    assert (delivery.status, delivery.last_code) == ("delivered", 204)
    assert dialled == [("127.0.0.1", server.port)]
    assert server.hosts == [f"{NAME}:{server.port}"]


def certificates(folder, name: str) -> tuple[str, ssl.SSLContext]:
    """A CA's certificate file (to trust) and a server context with a certificate it
    signed for ``name``."""
    now = datetime.datetime.now(datetime.UTC)

    def signed(subject, key, issuer, issuer_key, ca: bool, extensions=()):
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        for extension in extensions:
            builder = builder.add_extension(extension, critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = signed("Test CA", ca_key, "Test CA", ca_key, True)
    leaf = signed(
        name, key, "Test CA", ca_key, False, [x509.SubjectAlternativeName([x509.DNSName(name)])]
    )
    pem = serialization.Encoding.PEM
    (folder / "ca.pem").write_bytes(ca.public_bytes(pem))
    (folder / "leaf.pem").write_bytes(
        leaf.public_bytes(pem)
        + key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(folder / "leaf.pem")
    return str(folder / "ca.pem"), server


@pytest.mark.parametrize(
    ("host", "status", "error"),
    [
        (NAME, "delivered", ""),
        ("other.example.com", "pending", "ConnectError: [SSL: CERTIFICATE_VERIFY_FAILED]"),
    ],
)
def test_tls_to_a_pinned_address_checks_the_urls_host_name(
    flow, lookups, monkeypatch, tmp_path, django_capture_on_commit_callbacks, host, status, error
):
    ca, tls = certificates(tmp_path, NAME)
    monkeypatch.setenv("SSL_CERT_FILE", ca)
    server = Answering(no_content, tls)
    lookups.answers[host] = ["127.0.0.1"]

    delivery = deliver(flow, f"https://{host}:{server.port}/", django_capture_on_commit_callbacks)

    server.stop()
    assert delivery.status == status
    assert delivery.last_error.startswith(error)
    assert server.names == [host]
    assert server.hosts == ([f"{host}:{server.port}"] if status == "delivered" else [])


def test_a_failed_answer_leaves_its_code_and_a_short_clean_excerpt(
    flow, settings, django_capture_on_commit_callbacks
):
    def hostile(handler):
        handler.send_response(500)
        handler.send_header("X-Token", "hunter2")
        handler.end_headers()
        handler.wfile.write(b"Out of \x1b[31mluck\r\n\x00\tagain\xe2\x80\xae " + b"x" * 5_000_000)

    server = Answering(hostile)

    delivery = deliver(flow, f"http://127.0.0.1:{server.port}/", django_capture_on_commit_callbacks)

    server.stop()
    assert (delivery.status, delivery.last_code) == ("pending", 500)
    assert delivery.last_error == ("Out of [31mluck again " + "x" * 200)[:200]
    assert "hunter2" not in delivery.last_error


def test_an_answer_that_trickles_in_ends_the_try_at_its_timeout(
    flow, settings, django_capture_on_commit_callbacks
):
    settings.FACTORY_WEBHOOK_TIMEOUT = 1

    def trickle(handler):
        handler.wfile.write(b"HTTP/1.1 200 OK\r\n")
        for _ in range(25):  # a header a byte at a time, each well within the timeout
            handler.wfile.write(b"X")
            handler.wfile.flush()
            time.sleep(0.2)

    server = Answering(trickle)
    started = time.monotonic()

    delivery = deliver(flow, f"http://127.0.0.1:{server.port}/", django_capture_on_commit_callbacks)

    assert time.monotonic() - started < 3
    server.stop()
    assert (delivery.status, delivery.last_code) == ("pending", None)
    assert delivery.last_error == "no answer within 1 s"
