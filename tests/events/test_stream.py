"""The live stream: Server-Sent Events from the ASGI app, each member seeing its own
projects' events, resumable with Last-Event-ID, kept open with heartbeats."""

import asyncio
import contextlib
import json
import threading
import time

import httpx
import pytest
from django.db import connection
from knox.models import AuthToken

from events.stream import Client, hub
from tasks import services
from tests.conftest import postgres_only

pytestmark = pytest.mark.django_db(transaction=True)


def token(user) -> str:
    return AuthToken.objects.create(user=user)[1]


class Reader:
    """Reads one stream in a thread and keeps its events ``(id, type, payload)``."""

    def __init__(self, server, user, query="", last_event_id=None):
        headers = {"Authorization": f"Bearer {token(user)}"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        self.events, self.comments, self.status = [], [], None
        self.ready = threading.Event()
        self.url, self.headers = f"{server.url}/api/v1/events/stream{query}", headers
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        assert self.ready.wait(10), "the stream did not answer"
        deadline = time.monotonic() + 10
        while self.status == 200 and "connected" not in self.comments:
            assert time.monotonic() < deadline, "the stream did not say it is listening"
            time.sleep(0.02)

    def _read(self):
        with contextlib.suppress(httpx.RemoteProtocolError):  # the server stops at the end
            self._read_until_closed()

    def _read_until_closed(self):
        with (
            httpx.Client(timeout=30) as client,
            client.stream("GET", self.url, headers=self.headers) as response,
        ):
            self.status = response.status_code
            self.content_type = response.headers.get("content-type", "")
            self.ready.set()
            if response.status_code != 200:
                self.body = json.loads(response.read())
                return
            fields = {}
            for line in response.iter_lines():
                if line.startswith(":"):
                    self.comments.append(line[1:].strip())
                elif line == "" and "data" in fields:
                    payload = json.loads(fields["data"])
                    self.events.append((int(fields["id"]), fields["event"], payload))
                    fields = {}
                elif ":" in line:
                    name, _, value = line.partition(":")
                    fields[name] = value.lstrip()

    def wait_for(self, count, seconds=10):
        deadline = time.monotonic() + seconds
        while len(self.events) < count:
            assert time.monotonic() < deadline, f"got {len(self.events)} events, not {count}"
            time.sleep(0.05)
        return self.events


def test_a_member_hears_its_projects_events_as_they_happen(flow, other_flow, asgi_server):
    reader = Reader(asgi_server, flow.reviewer)

    task = flow.ready(title="Live")
    other_flow.ready(title="Not yours")
    services.task_claim(agent=flow.agent, project=flow.project)

    events = reader.wait_for(2)
    assert reader.content_type.startswith("text/event-stream")
    assert [(kind, payload["data"]["key"]) for _, kind, payload in events] == [
        ("task.published", task.key),
        ("task.claimed", task.key),
    ]
    time.sleep(0.5)
    assert [e[1] for e in reader.events] == ["task.published", "task.claimed"]
    assert events[0][0] == events[0][2]["id"]


def test_types_and_project_narrow_the_stream(flow, asgi_server):
    reader = Reader(asgi_server, flow.manager, "?project=FM&types=task.claimed")

    flow.claimed()

    [(_, kind, payload)] = reader.wait_for(1)
    assert (kind, payload["actor"]) == ("task.claimed", flow.agent.username)


def test_last_event_id_resumes_after_that_event(flow, asgi_server):
    first = flow.ready(title="Before")
    seen = first.events.get(transition="publish").pk
    second = flow.ready(title="Missed")

    reader = Reader(asgi_server, flow.reviewer, last_event_id=seen)

    [(_, kind, payload)] = reader.wait_for(1)
    assert (kind, payload["data"]["key"]) == ("task.published", second.key)


def test_a_quiet_stream_sends_heartbeats(flow, asgi_server):
    reader = Reader(asgi_server, flow.reviewer)

    time.sleep(1)

    assert "connected" in reader.comments
    assert reader.comments.count("heartbeat") >= 2


@pytest.mark.parametrize(
    ("query", "status", "code"),
    [
        ("?project=OT", 404, "not_found"),
        ("?types=task.nope", 400, "invalid"),
        ("?last_event_id=x", 400, "invalid"),
    ],
)
def test_a_bad_stream_request_is_refused_with_a_reason(
    flow, other_flow, asgi_server, query, status, code
):
    reader = Reader(asgi_server, flow.reviewer, query)

    reader.thread.join(5)
    assert (reader.status, reader.body["code"]) == (status, code)


def test_a_stream_without_a_token_is_refused(asgi_server):
    answer = httpx.get(f"{asgi_server.url}/api/v1/events/stream", timeout=5)

    assert (answer.status_code, answer.json()["code"]) == (401, "not_authenticated")


def test_under_wsgi_the_stream_says_it_needs_the_asgi_app(flow, client):
    client.force_login(flow.reviewer)

    answer = client.get("/api/v1/events/stream")

    assert (answer.status_code, answer.json()["code"]) == (501, "stream_needs_asgi")


def test_a_client_that_stops_reading_is_dropped_not_buffered(settings):
    settings.FACTORY_STREAM_BACKLOG = 3

    async def scenario():
        client = Client({1}, [])
        client.task = asyncio.get_running_loop().create_task(asyncio.sleep(60))
        hub().clients.add(client)
        try:
            payload = {"type": "task.published"}
            hub().publish([(n, 1, payload) for n in range(1, 6)])
            await asyncio.sleep(0)
            return client.queue.qsize(), client.dropped, client.task.cancelled()
        finally:
            hub().leave(client)

    assert asyncio.run(scenario()) == (3, True, True)


@postgres_only
def test_idle_stream_clients_hold_no_database_connection(flow, asgi_server):
    def connections_now():
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            )
            return cursor.fetchone()[0]

    first = Reader(asgi_server, flow.reviewer)
    flow.ready()
    first.wait_for(1)
    time.sleep(0.5)
    before = connections_now()

    readers = [Reader(asgi_server, flow.reviewer) for _ in range(20)]
    time.sleep(1)

    assert connections_now() == before
    flow.ready()
    assert all(len(r.wait_for(1)) == 1 for r in readers)
