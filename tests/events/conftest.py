"""A webhook receiver on 127.0.0.1 that verifies every delivery with the
``standardwebhooks`` library, as a receiver written by someone else would."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from tests.serving import serve_in_thread


class Receiver:
    """Answers ``self.status`` (after ``self.delay`` seconds); keeps what it got.

    ``received``: each verified delivery's ``(webhook-id, payload)``; ``refused``: the
    requests whose signature did not verify; ``requests``: every request's headers and body.
    """

    def __init__(self):
        self.secret = None
        self.status = 204
        self.delay = 0.0
        self.location = ""
        self.received: list[tuple[str, dict]] = []
        self.refused: list[str] = []
        self.requests: list[tuple[str, dict, bytes]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                headers = {k.lower(): v for k, v in self.headers.items()}
                with receiver.lock:
                    receiver.requests.append((self.path, headers, body))
                    if receiver.secret:
                        try:
                            payload = Webhook(receiver.secret).verify(body, headers)
                            receiver.received.append((headers["webhook-id"], payload))
                        except WebhookVerificationError as exc:
                            receiver.refused.append(str(exc))
                time.sleep(receiver.delay)
                self.send_response(receiver.status)
                if receiver.location:
                    self.send_header("Location", receiver.location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        serve_in_thread(self.server)

    def types(self) -> list[str]:
        return [payload["type"] for _, payload in self.received]

    def json_bodies(self) -> list[dict]:
        return [json.loads(body) for _, _, body in self.requests]


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.server.shutdown()
    r.server.server_close()
