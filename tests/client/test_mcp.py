"""The agent-side MCP server (``factory-mcp``), driven by the SDK's own client: in process
against the site's API, over stdio as a subprocess that holds nothing but a URL and a token,
and the site's own ``/mcp`` endpoint over streamable HTTP."""

import asyncio
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import httpx
import pytest
from django.core.cache import cache
from django.core.handlers.wsgi import WSGIHandler
from django.db import connection
from factory_client.client import FactoryClient
from factory_client.mcp import AgentServer
from knox.models import AuthToken
from mcp import Client, StdioServerParameters
from rest_framework.settings import api_settings
from rest_framework.test import APIClient
from rest_framework.throttling import SimpleRateThrottle

from decisions.models import Decision
from evidence.models import Evidence
from factory_site.mcp import http_app
from tasks import review
from tasks.models import Attempt, Task
from tests.conftest import postgres_only
from tests.factories import expire_lease

# The tools run in worker threads with their own database connections: commit for real.
pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
FACTORY_MCP = str(Path(sys.executable).parent / "factory-mcp")
TOOLS = {
    "claim_task",
    "get_context",
    "heartbeat",
    "save_checkpoint",
    "attach_evidence",
    "propose_decision",
    "submit_attempt",
    "release_task",
    "get_task",
    "wait_for_task",
    "search_decisions",
}
BAD = {"Authorization": "Bearer fm_" + "0" * 64}
JUNIT = (
    "<testsuite tests='1'><testcase classname='tests.test_claim' name='test_claim'/></testsuite>"
)


def as_user(user, workspace=None):
    """The agent-side server, its API calls answered by this site in process."""
    token = AuthToken.objects.create(user=user)[1]
    transport = httpx.WSGITransport(app=WSGIHandler())
    client = FactoryClient("http://testserver", token, transport=transport, retries=0)
    return AgentServer(lambda: client, workspace=workspace)


@pytest.fixture
def three_failures(monkeypatch):
    cache.clear()
    rates = {**api_settings.DEFAULT_THROTTLE_RATES, "auth_failure": "3/min"}
    monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", rates)
    yield
    cache.clear()


async def call(client, tool, **arguments):
    result = await client.call_tool(tool, arguments)
    text = result.content[0].text if result.content else ""
    return result.is_error, (
        text if result.is_error else result.structured_content or json.loads(text)
    )


def run(user, steps, workspace=None):
    server = as_user(user, workspace)

    async def main():
        async with Client(server) as client:
            return await steps(client)

    return asyncio.run(main())


def test_every_tool_is_listed_with_its_input_schema(flow):
    async def steps(client):
        return (await client.list_tools()).tools

    tools = {tool.name: tool for tool in run(flow.agent, steps)}

    assert set(tools) == TOOLS
    assert all(tool.description for tool in tools.values())
    assert set(tools["attach_evidence"].input_schema["properties"]) == {
        "attempt",
        "kind",
        "path",
        "content",
        "content_base64",
        "name",
        "criteria",
    }
    assert tools["save_checkpoint"].input_schema["required"] == ["attempt", "data", "revision"]
    assert tools["heartbeat"].input_schema["properties"]["attempt"]["type"] == "integer"


def test_an_agent_works_a_task_from_claim_to_review_with_tool_calls(flow, tmp_path):
    flow.gates({"tests-pass": {}})
    task = flow.ready(spec=flow.spec(), title="Claim endpoint")
    report = tmp_path / "junit.xml"
    report.write_text(JUNIT)

    async def steps(client):
        out = {"claim": await call(client, "claim_task", lease_seconds=600)}
        attempt = out["claim"][1]["attempt"]
        out["context"] = await call(client, "get_context", task=task.key, max_chars=4000)
        out["beat"] = await call(client, "heartbeat", attempt=attempt)
        out["save"] = await call(
            client, "save_checkpoint", attempt=attempt, data={"step": 2}, revision=0
        )
        out["file"] = await call(
            client,
            "attach_evidence",
            attempt=attempt,
            kind="junit",
            path=str(report),
            criteria=["AC-1"],
        )
        out["note"] = await call(
            client, "attach_evidence", attempt=attempt, kind="note", content="Checked by hand."
        )
        out["decide"] = await call(
            client, "propose_decision", attempt=attempt, title="T", context="C", decision="D"
        )
        out["submit"] = await call(
            client,
            "submit_attempt",
            attempt=attempt,
            summary="Done",
            commit="abcdef1000000000000000000000000000000000",
        )
        out["task"] = await call(client, "get_task", task=task.key)
        return out

    out = run(flow.agent, steps, workspace=tmp_path)

    assert all(not failed for failed, _ in out.values()), out
    assert (out["claim"][1]["task"], out["claim"][1]["number"]) == (task.key, 1)
    assert out["context"][1]["spec"]["criteria"][0]["key"] == "AC-1"
    assert out["save"][1]["revision"] == 1
    assert (out["file"][1]["kind"], out["file"][1]["provenance"], out["file"][1]["criteria"]) == (
        "junit",
        "agent",
        ["AC-1"],
    )
    assert out["decide"][1]["key"] == "FM-D1"
    assert out["submit"][1]["state"] == "checking"
    assert out["task"][1]["state"] == "in_review"  # the tests-pass gate ran on commit
    assert Task.objects.get(pk=task.pk).state == "in_review"
    assert Evidence.objects.filter(attempt__task=task).exclude(provenance="gate").count() == 2


def test_a_lost_lease_is_a_tool_error_starting_with_its_code(flow):
    _, attempt = flow.claimed()
    expire_lease(attempt)

    async def steps(client):
        return await call(client, "heartbeat", attempt=attempt.pk)

    failed, text = run(flow.agent, steps)

    assert failed is True
    assert text.startswith(f"lease_lost: the lease on attempt {attempt} expired at ")
    assert Attempt.objects.get(pk=attempt.pk).state == "running"


def test_an_agent_is_refused_a_reviewers_read_of_someone_elses_task(flow):
    task, _ = flow.claimed()

    async def steps(client):
        return await call(client, "get_context", task=task.key)

    failed, text = run(flow.agent2, steps)

    assert (failed, text.split(":")[0]) == (True, "not_lease_holder")


def test_get_context_in_markdown_answers_the_brief_and_records_its_hash(flow):
    task, attempt = flow.claimed(spec=flow.spec())

    async def steps(client):
        arguments = {"task": task.key, "format": "markdown", "max_chars": 4000}
        return await client.call_tool("get_context", arguments)

    result = run(flow.agent, steps)

    attempt.refresh_from_db()
    (content,) = result.content
    assert (result.is_error, result.structured_content) == (False, None)
    assert content.text.startswith(f"# {task.key}: A task\n\nState: claimed")
    assert (
        "- AC-1 — Claims are exclusive. — needs JUnit evidence in which the tests matching "
        "tests/test_claim.py::* ran and passed\n"
    ) in content.text
    assert content.text.endswith(
        f"Bundle sha256 `{attempt.context_sha256}`; budget 4000 characters.\n"
    )


def test_another_projects_task_does_not_exist_for_the_caller(flow, other_flow):
    theirs = other_flow.ready()

    async def steps(client):
        return await call(client, "get_task", task=theirs.key)

    assert run(flow.agent, steps) == (True, "not_found: not found, or not in one of your projects")


def test_evidence_by_path_needs_a_file_and_exactly_one_source(flow, tmp_path):
    _, attempt = flow.claimed()

    async def steps(client):
        missing = await call(
            client, "attach_evidence", attempt=attempt.pk, kind="log", path="no/such/file"
        )
        both = await call(
            client,
            "attach_evidence",
            attempt=attempt.pk,
            kind="log",
            content="x",
            content_base64="eA==",
        )
        return missing, both

    missing, both = run(flow.agent, steps, workspace=tmp_path)

    assert missing == (True, "invalid: no file at no/such/file")
    assert both == (True, "invalid: give exactly one of path, content or content_base64")
    assert Evidence.objects.count() == 0


def test_a_file_outside_the_workspace_is_refused_and_nothing_is_stored(flow, tmp_path):
    _, attempt = flow.claimed()
    workspace = tmp_path / "checkout"
    workspace.mkdir()

    async def steps(client):
        return await call(
            client, "attach_evidence", attempt=attempt.pk, kind="log", path="/etc/passwd"
        )

    refused = run(flow.agent, steps, workspace=workspace)

    assert refused == (True, f"invalid: /etc/passwd is outside the workspace {workspace}")
    assert Evidence.objects.count() == 0


@pytest.mark.parametrize("link", ["escape.log", "logs/escape.log"])
def test_a_symlink_out_of_the_workspace_is_not_followed(flow, tmp_path, link):
    _, attempt = flow.claimed()
    workspace, secret = tmp_path / "checkout", tmp_path / "secret.txt"
    (workspace / "logs").mkdir(parents=True)
    secret.write_text("the server's secret\n")
    (workspace / link).symlink_to(secret)

    async def steps(client):
        return await call(client, "attach_evidence", attempt=attempt.pk, kind="log", path=link)

    refused = run(flow.agent, steps, workspace=workspace)

    assert refused == (True, f"invalid: {link} is outside the workspace {workspace}")
    assert Evidence.objects.count() == 0


def test_a_symlinked_directory_out_of_the_workspace_is_not_followed(flow, tmp_path):
    _, attempt = flow.claimed()
    workspace, outside = tmp_path / "checkout", tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    (outside / "out.log").write_text("outside\n")
    (workspace / "reports").symlink_to(outside, target_is_directory=True)

    async def steps(client):
        return await call(
            client, "attach_evidence", attempt=attempt.pk, kind="log", path="reports/out.log"
        )

    refused = run(flow.agent, steps, workspace=workspace)

    assert refused == (True, f"invalid: reports/out.log is outside the workspace {workspace}")
    assert Evidence.objects.count() == 0


def test_a_hard_link_to_a_file_outside_the_workspace_is_refused(flow, tmp_path):
    _, attempt = flow.claimed()
    workspace, secret = tmp_path / "checkout", tmp_path / "id_rsa"
    workspace.mkdir()
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    os.link(secret, workspace / "run.log")

    async def steps(client):
        return await call(client, "attach_evidence", attempt=attempt.pk, kind="log", path="run.log")

    refused = run(flow.agent, steps, workspace=workspace)

    assert refused == (
        True,
        "invalid: run.log cannot be read safely: "
        "run.log has another name (a hard link); links are not followed",
    )
    assert Evidence.objects.count() == 0


def test_a_symlink_that_stays_inside_the_workspace_is_read(flow, tmp_path):
    _, attempt = flow.claimed()
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "run.log").write_text("ran\n")
    (tmp_path / "latest.log").symlink_to(tmp_path / "build" / "run.log")

    async def steps(client):
        return await call(
            client, "attach_evidence", attempt=attempt.pk, kind="log", path="latest.log"
        )

    failed, stored = run(flow.agent, steps, workspace=tmp_path)

    assert (failed, stored["size"], stored["provenance"]) == (False, 4, "agent")
    assert Evidence.objects.get().name == "latest.log"


def test_a_fifo_in_the_workspace_is_refused_without_hanging(flow, tmp_path):
    _, attempt = flow.claimed()
    os.mkfifo(tmp_path / "pipe")

    async def steps(client):
        return await call(client, "attach_evidence", attempt=attempt.pk, kind="log", path="pipe")

    assert run(flow.agent, steps, workspace=tmp_path) == (
        True,
        "invalid: pipe is not a regular file",
    )


def test_without_a_workspace_no_path_is_read(flow, tmp_path):
    _, attempt = flow.claimed()
    (tmp_path / "out.log").write_text("x\n")

    async def steps(client):
        return await call(
            client,
            "attach_evidence",
            attempt=attempt.pk,
            kind="log",
            path=str(tmp_path / "out.log"),
        )

    assert run(flow.agent, steps) == (
        True,
        "invalid: this server reads no local files (start factory-mcp with --workspace DIR);"
        " send content instead",
    )
    assert Evidence.objects.count() == 0


def test_search_decisions_answers_compactly(flow):
    from decisions import services as decisions

    decisions.decision_propose(
        project=flow.project,
        actor=flow.manager,
        title="Leases last five minutes",
        context="c",
        decision="300 s",
    )

    async def steps(client):
        return await call(client, "search_decisions", q="leases")

    failed, found = run(flow.agent, steps)

    assert failed is False
    assert found["result"] == [
        {
            "key": "FM-D1",
            "title": "Leases last five minutes",
            "state": "proposed",
            "decision": "300 s",
        }
    ]


def test_a_task_context_and_a_decision_are_resources(flow):
    task, _ = flow.claimed()
    from decisions import services as decisions

    decisions.decision_propose(
        project=flow.project, actor=flow.manager, title="T", context="c", decision="d"
    )

    async def steps(client):
        bundle = await client.read_resource(f"factory://tasks/{task.key}/context")
        record = await client.read_resource("factory://decisions/FM-D1")
        return json.loads(bundle.contents[0].text), json.loads(record.contents[0].text)

    bundle, record = run(flow.agent, steps)

    assert bundle["task"]["key"] == task.key
    assert (record["key"], record["state"]) == ("FM-D1", "proposed")


def test_the_server_offers_factory_inits_section_as_a_prompt(flow):
    from factory_client import instructions

    async def steps(client):
        listed = await client.list_prompts()
        got = await client.get_prompt("work_through_factory_memory")
        return [p.name for p in listed.prompts], got.messages[0].content.text

    names, text = run(flow.agent, steps)

    assert names == ["work_through_factory_memory"]
    assert text == instructions.SECTION


def test_the_stdio_server_needs_only_a_url_and_a_token(live_server, flow, tmp_path):
    flow.gates({"tests-pass": {}})
    task = flow.ready(spec=flow.spec(), title="over stdio")
    (tmp_path / "junit.xml").write_text(JUNIT)
    token = AuthToken.objects.create(user=flow.agent)[1]
    env = {"FACTORY_URL": live_server.url, "FACTORY_TOKEN": token}
    server = StdioServerParameters(
        command=FACTORY_MCP, args=["--workspace", str(tmp_path)], env=env, cwd=str(tmp_path)
    )

    async def main():
        async with Client(server) as client:
            claim = await call(client, "claim_task", lease_seconds=600)
            attempt = claim[1]["attempt"]
            outside = await call(
                client, "attach_evidence", attempt=attempt, kind="log", path=str(ROOT / "README.md")
            )
            report = await call(
                client,
                "attach_evidence",
                attempt=attempt,
                kind="junit",
                path="junit.xml",
                criteria=["AC-1"],
            )
            submit = await call(client, "submit_attempt", attempt=attempt, summary="Done")
            return claim, outside, report, submit, await call(client, "get_task", task=task.key)

    claim, outside, report, submit, after = asyncio.run(main())

    assert set(env) == {"FACTORY_URL", "FACTORY_TOKEN"}  # no DATABASE_URL, no settings module
    assert (claim[1]["task"], report[1]["provenance"], submit[1]["state"]) == (
        task.key,
        "agent",
        "checking",
    )
    assert outside == (True, f"invalid: {ROOT / 'README.md'} is outside the workspace {tmp_path}")
    assert (after[1]["state"], Task.objects.get(pk=task.pk).state) == ("in_review", "in_review")
    assert Decision.objects.count() == 0


def test_the_agent_side_server_does_not_import_django():
    code = "import sys, factory_client.mcp; print(sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'tasks', 'evidence', 'decisions', 'factory_site')))"
    env = {"PATH": os.environ["PATH"]}

    run = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd="/", capture_output=True, text=True, timeout=60
    )

    assert (run.returncode, run.stdout.strip()) == (0, "[]"), run.stderr


def test_the_client_distribution_depends_on_nothing_of_the_server():
    project = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())["project"]

    assert project["dependencies"] == ["httpx==0.28.1", "mcp==2.3.0"]
    assert project["scripts"] == {
        "factory": "factory_client.cli:main",
        "factory-mcp": "factory_client.mcp:main",
    }


@postgres_only
def test_the_http_server_at_mcp_takes_the_same_bearer_tokens(flow):
    import socket
    import time

    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    task = flow.ready(title="over http")
    token = AuthToken.objects.create(user=flow.agent)[1]
    database = connection.settings_dict
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "factory_site.settings",
        "DATABASE_URL": f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}/{database['NAME']}",
        "SITE_URL": f"http://127.0.0.1:{port}",
    }
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "factory_site.asgi:application",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
    )
    try:
        for _ in range(600):  # a loaded machine may take a while to import the site
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        url = f"http://127.0.0.1:{port}/mcp"
        anonymous = httpx2.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})

        async def main():
            headers = {"Authorization": f"Bearer {token}"}
            async with (
                httpx2.AsyncClient(headers=headers) as http,
                Client(streamable_http_client(url, http_client=http)) as client,
            ):
                return await call(client, "claim_task"), await call(
                    client, "attach_evidence", attempt=1, kind="log", path="/etc/passwd"
                )

        claim, by_path = asyncio.run(main())
        site = httpx2.get(f"http://127.0.0.1:{port}/login/")
    finally:
        server.terminate()
        server.wait(timeout=30)

    assert anonymous.status_code == 401
    assert (claim[0], claim[1]["task"]) == (False, task.key)
    assert by_path == (
        True,
        "invalid: paths are read only by the agent-side server (factory-mcp --workspace DIR);"
        " send content instead",
    )
    assert site.status_code == 200  # the rest of the site is still Django


def test_bad_tokens_at_mcp_count_with_the_apis_and_get_429_past_the_limit(flow, three_failures):
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}

    async def post_bad_tokens(times):
        transport = httpx.ASGITransport(app=http_app())  # from 127.0.0.1, as the API client
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            return [await http.post("/mcp", json=body, headers=BAD) for _ in range(times)]

    refused = asyncio.run(post_bad_tokens(2))
    api = APIClient().get("/api/v1/tasks/", HTTP_AUTHORIZATION=BAD["Authorization"])
    (throttled,) = asyncio.run(post_bad_tokens(1))

    assert [r.status_code for r in refused] + [api.status_code] == [401, 401, 401]
    assert (throttled.status_code, throttled.json()["code"]) == (429, "throttled")
    assert int(throttled.headers["Retry-After"]) > 0


def test_an_attachment_past_a_quota_is_a_quota_exceeded_tool_error(flow, settings):
    settings.FACTORY_QUOTA_ATTEMPT_FILES = 1
    _, attempt = flow.claimed()

    async def steps(client):
        first = await call(client, "attach_evidence", attempt=attempt.pk, kind="note", content="1")
        second = await call(client, "attach_evidence", attempt=attempt.pk, kind="note", content="2")
        return first, second

    (first_failed, _), (second_failed, text) = run(flow.agent, steps)

    assert (first_failed, second_failed) == (False, True)
    assert (
        text
        == f"quota_exceeded: with this file, the agent evidence of {attempt} would reach 2 files, past its quota of 1"
    )
    assert Evidence.objects.count() == 1


def test_get_task_carries_where_its_approved_change_is_in_landing(flow):
    flow.project.landing = {"mode": "push", "method": "squash", "batch_max": 4, "target_branch": ""}
    flow.project.save(update_fields=["landing"])
    flow.gates({})
    task, _ = flow.in_review()
    review.task_approve(task=task, actor=flow.reviewer)

    async def steps(client):
        return {"task": await call(client, "get_task", task=task.key)}

    out = run(flow.agent, steps)

    failed, found = out["task"]
    assert not failed, found
    assert (found["state"], found["landed_commit"]) == ("approved", "")
    # The lander ran when the approval committed, and could not work without a repository.
    assert found["landing"] == {
        "state": "error",
        "commit": "abc1230000000000000000000000000000000000",
        "change_id": "",
        "batch": found["landing"]["batch"],
        "reason": "nothing landed: the project has no repository to land on (repository_url)",
        # The batch ended without a verdict with it first: one toward its going back.
        "errors": 1,
    }


def test_heartbeat_and_submit_carry_usage_and_a_budget_ends_the_attempt(flow):
    flow.gates({})
    _, first = flow.claimed(title="first")
    _, second = flow.claimed(title="second", agent=flow.agent, budget_usd="1")

    async def steps(client):
        return [
            await call(client, "heartbeat", attempt=first.pk, usage={"input_tokens": 5}),
            await call(
                client,
                "submit_attempt",
                attempt=first.pk,
                summary="Done",
                usage={"cost_usd": "0.2"},
            ),
            await call(client, "heartbeat", attempt=second.pk, usage={"cost_usd": 1}),
        ]

    beat, submitted, exhausted = run(flow.agent, steps)

    assert (beat[0], submitted[0], exhausted[0]) == (False, False, True)
    assert exhausted[1].startswith("budget_exhausted: budget exhausted: this attempt's")
    first.refresh_from_db()
    assert (first.usage["input_tokens"], first.usage["cost_usd"]) == (5, "0.20")
    assert Attempt.objects.get(pk=second.pk).state == "abandoned"
