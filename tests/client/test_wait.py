"""Waiting for a task to reach a state: ``FactoryClient.wait_for_task``, ``factory wait``
and the ``wait_for_task`` tool, on the live stream of the ASGI site, and by polling where
the site serves no stream (WSGI)."""

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from django.core.handlers.wsgi import WSGIHandler
from django.db import connections
from factory_client import client as client_module
from factory_client.client import FactoryClient, FactoryError, WaitTimeout
from factory_client.mcp import AgentServer
from knox.models import AuthToken
from mcp import Client

from tasks import attempts
from tasks.models import Task
from tests.client.conftest import factory_in_process
from tests.client.test_mcp import call
from tests.serving import serve_in_thread

# The site answers from its own threads: commit for real.
pytestmark = pytest.mark.django_db(transaction=True)


def token_for(user) -> str:
    return AuthToken.objects.create(user=user)[1]


def api_for(server, user) -> FactoryClient:
    return FactoryClient(server.url, token_for(user), retries=0)


def later(seconds, move):
    """Run ``move`` (a service call) from another thread after ``seconds``."""

    def run():
        try:
            move()
        finally:
            connections.close_all()

    timer = threading.Timer(seconds, run)
    timer.start()
    return timer


def factory(server, user, *args):
    env = {"FACTORY_URL": server.url, "FACTORY_TOKEN": token_for(user)}
    return factory_in_process(*args, env=env)


def submit(attempt):
    return lambda: attempts.attempt_submit(
        attempt=attempt,
        actor=attempt.agent,
        summary="done",
        change={"commit": "abc1230000000000000000000000000000000000"},
    )


def test_wait_returns_at_once_when_the_task_is_already_in_the_state(flow, asgi_server):
    task, _ = flow.claimed()

    with api_for(asgi_server, flow.agent) as api:
        found = api.wait_for_task(task.key, ["claimed", "done"], timeout=5)

    assert (found["key"], found["state"]) == (task.key, "claimed")


def test_wait_returns_when_the_task_reaches_review(flow, asgi_server):
    flow.gates({})  # no gate: a submission goes straight to review
    task, attempt = flow.claimed()
    timer = later(0.5, submit(attempt))

    with api_for(asgi_server, flow.agent) as api:
        found = api.wait_for_task(task.key, ["in_review"], timeout=10)
    timer.join()

    assert not timer.is_alive()
    assert (found["key"], found["state"]) == (task.key, "in_review")
    assert Task.objects.get(pk=task.pk).state == "in_review"


def test_wait_hears_a_failed_gate_send_the_task_back_to_ready(flow, asgi_server):
    # The task's own move back to ready has no event; its attempt's gates_failed has.
    flow.gates({"tests-pass": {}})  # no JUnit report is attached: the gate fails
    task, attempt = flow.claimed()
    timer = later(0.5, submit(attempt))

    with api_for(asgi_server, flow.agent) as api:
        found = api.wait_for_task(task.key, ["ready"], timeout=10)
    timer.join()

    assert (found["state"], found["failed_attempts"], found["current_attempt"]) == (
        "ready",
        1,
        None,
    )


def test_wait_gives_up_after_its_timeout_with_the_state_it_saw(flow, asgi_server):
    task, _ = flow.claimed()

    with api_for(asgi_server, flow.agent) as api, pytest.raises(WaitTimeout) as raised:
        api.wait_for_task(task.key, ["done"], timeout=0.5)

    assert (
        str(raised.value) == f"timeout: {task.key} did not reach done within 0.5 s (it is claimed)"
    )
    assert raised.value.task["state"] == "claimed"


def test_waiting_on_another_projects_task_is_not_found(flow, other_flow, asgi_server):
    task, _ = other_flow.claimed()

    with api_for(asgi_server, flow.agent) as api, pytest.raises(FactoryError) as raised:
        api.wait_for_task(task.key, ["done"], timeout=5)

    assert (raised.value.status, raised.value.code) == (404, "not_found")


def test_under_wsgi_wait_polls_the_task_instead(flow, monkeypatch, caplog):
    monkeypatch.setattr(client_module, "WAIT_POLL_SECONDS", 0.2)
    flow.gates({})
    task, attempt = flow.claimed()
    timer = later(0.5, submit(attempt))
    transport = httpx.WSGITransport(app=WSGIHandler())
    api = FactoryClient("http://testserver", token_for(flow.agent), transport=transport)

    with api, caplog.at_level("INFO", logger="factory_client"):
        found = api.wait_for_task(task.key, ["in_review"], timeout=10)
    timer.join()

    said = [r for r in caplog.records if r.name == "factory_client"]
    assert found["state"] == "in_review"
    assert [(r.levelname, r.getMessage().split(":")[0]) for r in said] == [
        ("INFO", "stream_needs_asgi")
    ]
    assert said[0].getMessage().endswith(f"polling {task.key} every 0.2 s instead")


def test_factory_wait_prints_the_state_reached_and_exits_0(flow, asgi_server):
    flow.gates({})
    task, attempt = flow.claimed()
    timer = later(0.5, submit(attempt))

    run = factory(asgi_server, flow.agent, "wait", task.key, "--until", "in_review,done")
    timer.join()
    as_json = factory(asgi_server, flow.agent, "wait", task.key, "--until", "in_review", "--json")

    assert (run.returncode, run.stdout, run.stderr) == (0, f"{task.key} is in_review\n", "")
    assert as_json.returncode == 0, as_json.stderr
    assert {k: json.loads(as_json.stdout)[k] for k in ("key", "state")} == {
        "key": task.key,
        "state": "in_review",
    }


def test_factory_wait_past_its_timeout_exits_6(flow, asgi_server):
    task, _ = flow.claimed()

    run = factory(asgi_server, flow.agent, "wait", task.key, "--until", "done", "--timeout", "0.5")

    assert (run.returncode, run.stdout) == (6, "")
    assert run.stderr == f"timeout: {task.key} did not reach done within 0.5 s (it is claimed)\n"


def test_factory_wait_on_another_projects_task_exits_1_with_not_found(
    flow, other_flow, asgi_server
):
    task, _ = other_flow.claimed()

    run = factory(asgi_server, flow.agent, "wait", task.key, "--until", "done")

    assert (run.returncode, run.stdout) == (1, "")
    assert run.stderr.startswith("not_found: ")


def test_factory_wait_refuses_an_unknown_state_before_any_call(flow, asgi_server):
    run = factory(asgi_server, flow.agent, "wait", "FM-1", "--until", "in-review")

    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr.splitlines()[-1].startswith(
        "factory wait: error: argument --until: unknown task state in-review: choose from draft,"
    )


def run_tools(api, steps):
    async def main():
        async with Client(AgentServer(lambda: api, workspace=None)) as client:
            return await steps(client)

    return asyncio.run(main())


def test_the_wait_for_task_tool_answers_the_state_reached(flow, asgi_server):
    flow.gates({})
    task, attempt = flow.claimed()
    timer = later(0.5, submit(attempt))

    async def steps(client):
        return await call(
            client, "wait_for_task", key=task.key, until=["in_review"], timeout_seconds=10
        )

    answer = run_tools(api_for(asgi_server, flow.agent), steps)
    timer.join()

    assert answer == (
        False,
        {"key": task.key, "title": task.title, "state": "in_review", "attempt": attempt.pk},
    )


def test_the_wait_for_task_tool_errors_with_timeout_or_the_apis_code(flow, other_flow, asgi_server):
    task, _ = flow.claimed()
    theirs, _ = other_flow.claimed()

    async def steps(client):
        return [
            await call(client, "wait_for_task", key=task.key, until=["done"], timeout_seconds=0.5),
            await call(client, "wait_for_task", key=theirs.key, until=["done"]),
            await call(client, "wait_for_task", key=task.key, until=["finished"]),
        ]

    late, missing, unknown = run_tools(api_for(asgi_server, flow.agent), steps)

    assert late == (True, f"timeout: {task.key} did not reach done within 0.5 s (it is claimed)")
    assert (missing[0], missing[1].split(":")[0]) == (True, "not_found")
    assert (unknown[0], unknown[1].split(": choose")[0]) == (
        True,
        "invalid: unknown task states finished",
    )


class Dropping(BaseHTTPRequestHandler):
    """A stream that sends one event per connection and then drops it."""

    protocol_version = "HTTP/1.0"  # the body ends when the connection closes
    seen: list = []

    def do_GET(self):
        type(self).seen.append(self.headers.get("Last-Event-ID"))
        number = len(type(self).seen)
        body = "retry: 10\n: connected\n\n"  # reconnect after 10 ms
        body += f'id: {number * 10}\nevent: task.claimed\ndata: {{"n": {number}}}\n\n'
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


def test_events_reconnect_after_a_drop_with_the_last_event_id():
    Dropping.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Dropping)
    serve_in_thread(server)
    api = FactoryClient(f"http://127.0.0.1:{server.server_port}", "fm_unused")

    try:
        stream = api.events(project="FM", types=["task.*"], last_event_id=7)
        events = [next(stream) for _ in range(3)]
        stream.close()
    finally:
        server.shutdown()
        server.server_close()

    assert events == [
        {"id": 10, "type": "task.claimed", "payload": {"n": 1}},
        {"id": 20, "type": "task.claimed", "payload": {"n": 2}},
        {"id": 30, "type": "task.claimed", "payload": {"n": 3}},
    ]
    assert Dropping.seen == ["7", "10", "20"]
