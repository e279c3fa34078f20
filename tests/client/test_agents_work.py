"""`factory work --agent NAME` end to end: a live server, the demo repository, and each
preset's stand-in CLI (tests/fixtures/agents/standin.py) on a PATH of its own. Claim →
agent → commit → usage sent → submit → the runner verifies; the dashboard's per-model
cost equals the sum of what the stand-in reported (or what the price table priced)."""

import json
import os
import subprocess
from decimal import Decimal

import pytest
from django.utils import timezone
from factory_client import instructions

from evidence.models import GateRun
from oversight.costs import cost_figures
from projects import services as project_services
from tasks.models import Attempt
from tests.client.conftest import sh
from tests.client.standins import check_output, install
from tests.client.test_work import FACTORY, factory_work

# The client decides by the API's answers, which the API's own tests check on both engines;
# its journeys here reach the database only through those calls (ADR 0015, "engine_neutral").
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.engine_neutral]

PRICES = {
    "gpt-5-codex": {"input": "1.25", "output": "10", "cache_read": "0.125", "set_on": "2026-12-01"},
    "gemini-2.5-pro": {
        "input": "1.25",
        "output": "10",
        "cache_read": "0.31",
        "set_on": "2026-12-01",
    },
    "claude-sonnet-4-5": {
        "input": "3",
        "output": "15",
        "cache_read": "0.30",
        "cache_write": "3.75",
        "set_on": "2026-12-01",
    },
}
# What each stand-in reports: two turns; a cost where the CLI prints one.
RUNS = {
    "claude": (
        "",
        [
            {
                "model": "claude-sonnet-4-5",
                "input": 1200,
                "output": 300,
                "cache_read": 4000,
                "cache_write": 900,
                "cost": 0.0321,
            },
            {"model": "claude-haiku-4-5", "input": 800, "output": 60, "cost": 0.0012},
        ],
    ),
    "codex": (
        "-m gpt-5-codex",
        [
            {"model": "gpt-5-codex", "input": 6000, "output": 900, "cache_read": 18000},
            {"model": "gpt-5-codex", "input": 1000, "output": 100},
        ],
    ),
    "gemini": (
        "",
        [
            {"model": "gemini-2.5-pro", "input": 9000, "output": 800, "cache_read": 6000},
            {"model": "gemini-2.5-pro", "input": 1000, "output": 200},
        ],
    ),
    "aider": (
        "",
        [
            {"model": "gpt-4o", "input": 2300, "output": 120, "cost": 0.007},
            {"model": "gpt-4o", "input": 900, "output": 80, "cost": 0.0031},
        ],
    ),
    "opencode": (
        "-m anthropic/claude-sonnet-4-5",
        [
            {
                "model": "anthropic/claude-sonnet-4-5",
                "input": 3000,
                "output": 250,
                "cache_read": 10000,
                "cost": 0.0123,
            },
            {"model": "anthropic/claude-sonnet-4-5", "input": 400, "output": 50, "cost": 0.002},
        ],
    ),
}


def expected_cost(turns) -> dict[str, Decimal]:
    """Per model: the sum of the costs reported, else the tokens at the price table's prices."""
    found = {}
    for turn in turns:
        model = turn["model"]
        if "cost" in turn:
            found[model] = found.get(model, Decimal(0)) + Decimal(repr(turn["cost"]))
            continue
        price = PRICES[model]
        found[model] = found.get(model, Decimal(0)) + sum(
            Decimal(price.get(kind, "0")) * turn.get(field, 0) / 1_000_000
            for kind, field in (
                ("input", "input"),
                ("output", "output"),
                ("cache_read", "cache_read"),
                ("cache_write", "cache_write"),
            )
        )
    return {m: c.quantize(Decimal("0.000001")) for m, c in found.items()}


@pytest.fixture
def priced(project):
    project_services.project_update(project=project.project, actor=project.manager, prices=PRICES)
    return project


def work_with(live_server, flow, clone, tmp_path, name, *args, env=None, timeout=120):
    bin_dir = tmp_path / "agents-bin"
    install(bin_dir, name)
    environ = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", **(env or {})}
    return factory_work(
        live_server, flow, clone, "--agent", name, *args, env=environ, timeout=timeout
    )


@pytest.mark.parametrize("name", sorted(RUNS))
def test_each_preset_works_a_task_from_claim_to_the_runners_verdict(
    live_server,
    priced,
    clone,
    tmp_path,
    name,
):
    task = priced.ready(title="Claims respect dependencies", allowed_paths=["**"])
    agent_args, turns = RUNS[name]
    record = tmp_path / "record.json"
    env = {"STANDIN_TURNS": json.dumps(turns), "STANDIN_RECORD": str(record)}

    args = ("--agent-args", agent_args) if agent_args else ()
    run = work_with(live_server, priced, clone, tmp_path, name, *args, env=env)

    assert run.returncode == 0, run.stdout + run.stderr
    task.refresh_from_db()
    attempt = task.current_attempt
    assert task.state == "in_review"
    assert GateRun.objects.get(attempt=attempt, gate="runner").state == "passed"
    said = json.loads(record.read_text())
    assert said["token"] is False  # the site's token is not in the agent's environment
    assert said["brief_chars"] > 100
    expected = expected_cost(turns)
    figures = cost_figures(
        project_ids=[priced.project.pk], start=attempt.started_at, end=timezone.now()
    )
    assert {row.name: row.cost_usd for row in figures["models"]} == expected
    assert figures["total"].cost_usd == sum(expected.values())
    sources = {row.name: row.cost_source for row in figures["models"]}
    assert set(sources.values()) == ({"priced"} if name in ("codex", "gemini") else {"reported"})
    log = (clone / ".factory" / "logs" / f"{task.key}-attempt-1.log").read_text()
    assert check_output(name, log) == []


def test_usage_reaches_the_server_with_the_heartbeats_while_the_agent_runs(
    live_server,
    priced,
    clone,
    tmp_path,
):
    task = priced.ready(title="A task", allowed_paths=["**"], budget_usd="0.05")
    turns = [{"model": "claude-sonnet-4-5", "input": 20000, "output": 1000}]  # $0.075 priced
    env = {"STANDIN_TURNS": json.dumps(turns), "STANDIN_MODE": "hang"}

    run = work_with(live_server, priced, clone, tmp_path, "claude", "--lease", "3", env=env)

    assert run.returncode == 5, run.stdout + run.stderr
    attempt = Attempt.objects.get(task=task)
    task.refresh_from_db()
    assert (task.state, attempt.state) == ("ready", "abandoned")
    assert (attempt.usage["cost_usd"], attempt.usage["priced_cost_usd"]) == ("0.00", "0.075")
    assert attempt.end_reason.startswith("budget exhausted")
    assert "lease lost (budget_exhausted: budget exhausted" in run.stdout


def test_a_missing_executable_fails_before_any_claim_naming_it(
    live_server, project, clone, tmp_path
):
    task = project.ready(title="A task", allowed_paths=["**"])

    run = factory_work(
        live_server, project, clone, "--agent", "gemini", env={"PATH": "/usr/bin:/bin"}
    )

    assert run.returncode == 2
    assert run.stderr == (
        "factory work: the gemini preset needs `gemini` (Gemini CLI) on the PATH, outside the"
        " repository; none was found\n"
    )
    assert Attempt.objects.filter(task=task).count() == 0


def test_a_claude_committed_in_the_repository_is_never_run(live_server, project, clone, tmp_path):
    task = project.ready(title="A task", allowed_paths=["**"])
    install(clone / "bin", "claude")
    sh(clone, "git", "add", "bin/claude")
    sh(clone, "git", "-c", "user.name=x", "-c", "user.email=x@y", "commit", "-qm", "a claude")
    path = os.pathsep.join([str(clone / "bin"), ".", "/usr/bin", "/bin"])

    run = factory_work(live_server, project, clone, "--agent", "claude", env={"PATH": path})

    assert run.returncode == 2
    assert "the claude preset needs `claude` (Claude Code) on the PATH" in run.stderr
    assert Attempt.objects.filter(task=task).count() == 0


def test_an_agent_that_commits_its_own_work_is_submitted_at_its_commit(
    live_server,
    project,
    clone,
    tmp_path,
):
    task = project.ready(title="A task", allowed_paths=["**"])

    run = work_with(live_server, project, clone, tmp_path, "codex", env={"STANDIN_MODE": "commit"})

    assert run.returncode == 0, run.stdout + run.stderr
    attempt = Attempt.objects.get(task=task)
    assert attempt.summary == "Claims respect dependencies again"
    assert f"the agent committed {attempt.change['commit'][:12]}" in run.stdout


def test_an_agent_that_exits_0_without_a_change_releases_the_task(
    live_server,
    project,
    clone,
    tmp_path,
):
    task = project.ready(title="A task", allowed_paths=["**"])

    run = work_with(live_server, project, clone, tmp_path, "aider", env={"STANDIN_MODE": "nothing"})

    assert run.returncode == 4
    attempt = Attempt.objects.get(task=task)
    assert (attempt.state, attempt.end_reason) == ("released", "the agent changed nothing")


def test_an_agent_that_never_exits_is_stopped_at_the_timeout(
    live_server,
    project,
    clone,
    tmp_path,
):
    task = project.ready(title="A task", allowed_paths=["**"])
    pid = tmp_path / "pid"

    run = work_with(
        live_server,
        project,
        clone,
        tmp_path,
        "gemini",
        "--timeout",
        "2",
        "--grace",
        "1",
        env={"STANDIN_MODE": "hang", "STANDIN_PID": str(pid)},
    )

    assert run.returncode == 4
    assert "the agent ran past --timeout 2 s and was stopped" in run.stdout
    assert not os.path.exists(f"/proc/{pid.read_text()}")
    assert Attempt.objects.get(task=task).state == "released"


def test_a_hundred_megabytes_of_output_still_gives_the_usage(live_server, priced, clone, tmp_path):
    task = priced.ready(title="A task", allowed_paths=["**"])
    turns = [{"model": "claude-sonnet-4-5", "input": 10, "output": 5, "cost": 0.5}]
    env = {"STANDIN_TURNS": json.dumps(turns), "STANDIN_MODE": "huge", "STANDIN_HUGE_MB": "100"}

    run = work_with(live_server, priced, clone, tmp_path, "claude", env=env, timeout=300)

    assert run.returncode == 0, run.stdout[-2000:] + run.stderr
    attempt = Attempt.objects.get(task=task)
    assert attempt.usage["by_model"]["claude-sonnet-4-5"]["cost_usd"] == "0.50"
    log = clone / ".factory" / "logs" / f"{task.key}-attempt-1.log"
    assert log.stat().st_size == 32 << 20


def test_a_negative_cost_in_the_output_is_refused_and_nothing_of_it_is_sent(
    live_server,
    project,
    clone,
    tmp_path,
):
    task = project.ready(title="A task", allowed_paths=["**"])
    turns = [{"model": "m", "input": 10, "output": 5, "cost": -3}]

    run = work_with(
        live_server, project, clone, tmp_path, "opencode", env={"STANDIN_TURNS": json.dumps(turns)}
    )

    assert run.returncode == 0, run.stdout + run.stderr
    attempt = Attempt.objects.get(task=task)
    assert (attempt.usage["input_tokens"], attempt.usage["cost_usd"]) == (0, "0.00")
    assert "1 usage report(s) in the agent's output refused: cost -3" in run.stdout


def test_a_retry_resumes_the_agents_session_in_the_same_worktree(
    live_server,
    project,
    clone,
    tmp_path,
):
    task = project.ready(title="A task", allowed_paths=["**"])
    record = tmp_path / "record.json"
    first = work_with(
        live_server, project, clone, tmp_path, "claude", env={"STANDIN_MODE": "crash"}
    )

    second = work_with(
        live_server,
        project,
        clone,
        tmp_path,
        "claude",
        "--resume-session",
        env={"STANDIN_RECORD": str(record)},
    )

    session = "3f1c2a9e-8b7d-4e2a-9c1f-5d6e7f8a9b0c"
    assert (first.returncode, second.returncode) == (4, 0), second.stdout + second.stderr
    earlier = Attempt.objects.get(task=task, number=1)
    assert earlier.checkpoint["agent_session"]["id"] == session
    assert json.loads(record.read_text())["given"]["--resume"] == [session]
    assert f"resuming claude session {session}" in second.stdout


def test_another_tasks_session_is_neither_kept_nor_resumed(
    live_server,
    project,
    clone,
    tmp_path,
):
    task = project.ready(title="One", allowed_paths=["**"])
    theirs = {"FM-99": {"preset": "claude", "id": "shared-session", "worktree": "/x", "host": "h"}}
    (clone / ".factory").mkdir(exist_ok=True)
    (clone / ".factory" / "sessions.json").write_text(json.dumps(theirs))
    env = {"STANDIN_SESSION": "shared-session"}

    run = work_with(live_server, project, clone, tmp_path, "claude", env=env)

    assert run.returncode == 0, run.stdout + run.stderr
    assert "session shared-session is another task's: not kept" in run.stdout
    assert json.loads((clone / ".factory" / "sessions.json").read_text()) == theirs
    assert Attempt.objects.get(task=task).checkpoint is None


def test_an_agent_that_tells_the_next_to_push_to_main_fails_init_check_and_review_decides(
    live_server,
    project,
    clone,
    tmp_path,
    origin,
    upstream,
):
    task = project.ready(title="A task", allowed_paths=["**"])

    (upstream / "AGENTS.md").write_text(instructions.block())
    sh(upstream, "git", "add", "AGENTS.md")
    sh(upstream, "git", "-c", "user.name=x", "-c", "user.email=x@y", "commit", "-qm", "init")
    sh(upstream, "git", "push", "-q", str(origin), "HEAD:main")

    run = work_with(live_server, project, clone, tmp_path, "claude", env={"STANDIN_MODE": "poison"})

    assert run.returncode == 0, run.stdout + run.stderr
    attempt = Attempt.objects.get(task=task)
    sh(upstream, "git", "fetch", "-q", str(origin), f"factory/{task.key}/attempt-1")
    sh(upstream, "git", "checkout", "-q", attempt.change["commit"])
    check = subprocess.run(
        [FACTORY, "init", "--check", "--repo", str(upstream)], capture_output=True, text=True
    )
    assert check.returncode == 1
    assert "AGENTS.md: its factory-memory section differs" in check.stderr
    task.refresh_from_db()
    assert task.state == "in_review"  # the runner and the reviewer still decide
