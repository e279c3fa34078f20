"""A webhook receiver process, as a team would write one: it verifies each delivery with
the ``standardwebhooks`` library and keeps what it got. The proofs, the benchmarks and the
worker tests start it; it may be killed and started again on the same port and log.

    python -m proof.receiver --port 9100 --secret whsec_… --log received.jsonl

Each verified delivery appends a line ``{"id": webhook-id, "type", "event", "at"}`` to the
log (``at``: the time it arrived, for latency). ``POST /_control`` with JSON
``{"status": 500, "delay": 0, "location": ""}`` changes its answers; ``GET /_stats`` answers
``{"received", "unique", "refused", "requests"}``.
"""

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


def serve(port: int, secret: str, log_path: str) -> None:
    behaviour = {"status": 204, "delay": 0.0, "location": ""}
    stats = {"received": 0, "refused": 0, "requests": 0}
    seen: set[str] = set()
    lock = threading.Lock()
    log = open(log_path, "a", buffering=1)  # noqa: SIM115 (lives as long as the process)
    webhook = Webhook(secret)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self, status: int, body: bytes = b"", location: str = "") -> None:
            self.send_response(status)
            if location:
                self.send_header("Location", location)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            with lock:
                body = json.dumps({**stats, "unique": len(seen)}).encode()
            self._answer(200, body)

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.path == "/_control":
                with lock:
                    behaviour.update(json.loads(body))
                return self._answer(204)
            headers = {k.lower(): v for k, v in self.headers.items()}
            with lock:
                stats["requests"] += 1
                status, delay, location = (
                    behaviour["status"],
                    behaviour["delay"],
                    behaviour["location"],
                )
            if delay:
                time.sleep(delay)
            ok = 200 <= status < 300
            try:
                payload = webhook.verify(body, headers)
            except WebhookVerificationError:
                with lock:
                    stats["refused"] += 1
                return self._answer(400, b'{"detail": "bad signature"}')
            if ok:
                with lock:
                    stats["received"] += 1
                    seen.add(headers["webhook-id"])
                    log.write(
                        json.dumps(
                            {
                                "id": headers["webhook-id"],
                                "type": payload.get("type"),
                                "event": payload.get("id"),
                                "at": time.time(),
                            }
                        )
                        + "\n"
                    )
            self._answer(status, location=location)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    print(f"receiving on 127.0.0.1:{port}", flush=True)
    server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m proof.receiver")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--secret", required=True)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    serve(args.port, args.secret, args.log)


if __name__ == "__main__":
    main()
