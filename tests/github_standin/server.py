"""The stand-in's HTTP side: a threaded server on 127.0.0.1 that checks each request against
GitHub's description before answering it, checks its own answer after, authenticates as
GitHub does (an App's JWT, an installation's token, a person's token), refuses what the
caller's permissions do not allow, and answers with a fault when a test asks for one.

A request or an answer that the description does not allow is recorded in ``violations``;
the ``github`` fixture fails the test at teardown when any was recorded.
"""

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

from tests.github_standin.description import description
from tests.github_standin.graphql_api import GraphQL
from tests.github_standin.rest import ROUTES, Answer, Rest
from tests.github_standin.world import World
from tests.serving import serve_in_thread

LEVELS = {"read": 1, "write": 2}


@dataclass
class Fault:
    """Answer ``count`` matching calls (or one in ``every``) with ``kind``: ``502``, ``429``
    (with ``Retry-After``), ``secondary`` (403, a secondary rate limit with Retry-After),
    ``timeout`` (no answer until the test ends), or ``lost`` (the call is acted on, then
    answered 502: a write that happened though its caller cannot know)."""

    kind: str
    count: int = 1
    every: int = 0
    retry_after: int = 1
    match: str = ""  # a substring of "METHOD /path"
    seen: int = 0

    def fires(self, call: str) -> bool:
        if self.match not in call:
            return False
        self.seen += 1
        if self.every:
            return self.seen % self.every == 0
        if self.count > 0:
            self.count -= 1
            return True
        return False


@dataclass
class Exchange:
    method: str
    path: str
    status: int
    authorization: str = field(repr=False, default="")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "Server"

    def log_message(self, format, *args):  # the test's output is its own
        pass

    def do_GET(self):
        self.handle_call()

    do_POST = do_PATCH = do_PUT = do_DELETE = do_GET

    def send(self, status: int, body, headers: dict | None = None) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-GitHub-Request-Id", "STANDIN")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def handle_call(self):
        standin = self.server.standin
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        call = f"{self.command} {parts.path}"
        authorization = self.headers.get("Authorization", "")
        with standin.lock:
            fault = next((f for f in standin.faults if f.fires(call)), None)
        if fault is not None and fault.kind != "lost":
            standin.record(Exchange(self.command, parts.path, 0, authorization))
            return self.fault(fault)
        try:
            body = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            standin.violation(f"{call}: the body is not JSON")
            return self.send(400, {"message": "Problems parsing JSON"})
        with standin.world.lock:
            # GitHub's merge queues move on their own between calls: before and after each.
            standin.world.advance_all()
            status, answer, headers = standin.answer(
                self.command, parts.path, dict(parse_qsl(parts.query)), body, authorization
            )
            standin.world.advance_all()
        if fault is not None:  # "lost": done, and the answer lost on the way back
            standin.record(Exchange(self.command, parts.path, 0, authorization))
            return self.send(502, {"message": "Server Error", "documentation_url": ""})
        standin.record(Exchange(self.command, parts.path, status, authorization))
        self.send(status, answer, headers)

    def fault(self, fault: Fault):
        if fault.kind == "timeout":
            self.server.standin.released.wait(timeout=30)
            self.close_connection = True
            return
        if fault.kind == "502":
            return self.send(502, {"message": "Server Error", "documentation_url": ""})
        if fault.kind == "429":
            return self.send(
                429,
                {"message": "API rate limit exceeded", "documentation_url": ""},
                {"Retry-After": str(fault.retry_after), "X-RateLimit-Remaining": "0"},
            )
        return self.send(
            403,
            {
                "message": "You have exceeded a secondary rate limit. Please wait a few "
                "minutes before you try again.",
                "documentation_url": "",
            },
            {"Retry-After": str(fault.retry_after)},
        )


class Server(ThreadingHTTPServer):
    daemon_threads = True
    standin: "StandIn"


@dataclass
class Caller:
    installation: object = None
    login: str | None = None
    scopes: str | None = None
    push: bool = False
    admin: bool = False
    app: bool = False


class StandIn:
    """A GitHub on loopback (``url``), its ``world``, the ``faults`` to inject, the
    ``exchanges`` it served and the ``violations`` of GitHub's description it saw."""

    def __init__(self, world: World):
        self.world = world
        self.lock = threading.Lock()
        self.faults: list[Fault] = []
        self.exchanges: list[Exchange] = []
        self.violations: list[str] = []
        self.released = threading.Event()
        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.standin = self
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.rest = Rest(world, self.url)
        self.thread = None

    def start(self) -> "StandIn":
        self.thread = serve_in_thread(self.server)
        return self

    def stop(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()

    def fail(self, kind: str, **how) -> Fault:
        fault = Fault(kind, **how)
        with self.lock:
            self.faults.append(fault)
        return fault

    def record(self, exchange: Exchange) -> None:
        with self.lock:
            self.exchanges.append(exchange)

    def violation(self, text: str) -> None:
        with self.lock:
            self.violations.append(text)

    def calls(self) -> list[str]:
        with self.lock:
            return [f"{e.method} {e.path} {e.status}" for e in self.exchanges]

    def caller(self, authorization: str, app_route: bool) -> Caller | None:
        scheme, _, credential = authorization.partition(" ")
        if app_route:
            ok = scheme.lower() == "bearer" and self.world.app_from_jwt(credential)
            return Caller(app=True) if ok else None
        if scheme.lower() not in ("token", "bearer"):
            return None
        token = self.world.token(credential)
        if token is None:
            return None
        return Caller(token.installation, token.login, token.scopes, token.push, token.admin)

    def allowed(self, caller: Caller, permission: tuple[str, str]) -> bool:
        name, level = permission
        if caller.installation is not None:
            held = caller.installation.permissions.get(name)
            return held is not None and LEVELS[held] >= LEVELS[level]
        if name == "administration":
            return caller.admin
        return level == "read" or caller.push

    def answer(self, method: str, path: str, query: dict, body, authorization: str):
        """(status, body, headers) for one request; violations recorded on the way."""
        if method == "POST" and path == "/graphql":
            return self.graphql(body, authorization)
        operation, params = description().find(method, path)
        if operation is None:
            self.violation(f"{method} {path}: no such operation in GitHub's description")
            return 404, {"message": "Not Found", "documentation_url": ""}, {}
        problems = description().check_request(operation, query, body)
        for problem in problems:
            self.violation(f"{operation.name}: {problem}")
        if problems:
            # GitHub checks a request against the same schemas and refuses it whole.
            return 422, {"message": "Invalid request.", "documentation_url": ""}, {}
        permission, handler = ROUTES[operation.name]
        caller = self.caller(authorization, permission == "app")
        headers: dict = {}
        if caller is None:
            status, answer = 401, {"message": "Bad credentials", "documentation_url": ""}
        elif permission != "app" and not self.covers(caller, params):
            status, answer = 404, {"message": "Not Found", "documentation_url": ""}
        elif permission != "app" and not self.allowed(caller, permission):
            status = 403
            answer = {"message": "Resource not accessible by integration", "documentation_url": ""}
            if caller.login:
                answer["message"] = "Must have admin rights to Repository."
            headers["X-Accepted-GitHub-Permissions"] = f"{permission[0]}={permission[1]}"
        else:
            try:
                found = getattr(self.rest, handler)(params, query, body or {}, caller)
            except Answer as refused:
                status, answer, headers = refused.status, refused.body, refused.headers
            else:
                status, answer = found[0], found[1]
                headers = found[2] if len(found) > 2 else {}
        if caller is not None and caller.scopes is not None:
            headers["X-OAuth-Scopes"] = caller.scopes
        for problem in description().check_response(operation, status, answer):
            self.violation(f"{operation.name} answered {status}: {problem}")
        return status, answer, headers

    def covers(self, caller: Caller, params: dict) -> bool:
        """Whether the caller may see the repository at all (an installation sees only the
        repositories it was given; to others GitHub says 404, not 403)."""
        if caller.installation is None or "owner" not in params:
            return True
        wanted = f"{params['owner']}/{params['repo']}".lower()
        return wanted in [name.lower() for name in caller.installation.repositories]

    def graphql(self, body, authorization: str):
        caller = self.caller(authorization, False)
        if caller is None:
            return 401, {"message": "Bad credentials", "documentation_url": ""}, {}
        api = GraphQL(self.world, lambda name, level: self.allowed(caller, (name, level)))
        answer, problems = api.answer(body)
        for problem in problems:
            self.violation(f"POST /graphql: {problem}")
        return 200, answer, {}
