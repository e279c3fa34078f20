"""`factory work` against a live server, with real processes as agents (tests/client/agent.py).

The project's repository is a bare repository whose main has the demo's failing test; the
agent works in a clone of it.
"""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from knox.models import AuthToken

from demo.repository import VERIFY
from evidence.models import GateRun
from projects.models import Project
from tasks import attempts, review
from tasks.models import Attempt, Task
from tests.client.conftest import factory_in_process, sh
from tests.factories import expire_lease

FACTORY = str(Path(sys.executable).parent / "factory")
AGENT = [sys.executable, str(Path(__file__).with_name("agent.py"))]

# The client decides by the API's answers, which the API's own tests check on both engines;
# its journeys here reach the database only through those calls (ADR 0015, "engine_neutral").
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.engine_neutral]


def factory_work(live_server, flow, clone, *args, env=None, timeout=120, process=False):
    """``factory work`` on ``clone``: its main() in this process (factory_in_process), or
    with ``process`` the installed command as a process of its own."""
    token = AuthToken.objects.create(user=flow.agent)[1]
    environ = {"FACTORY_URL": live_server.url, "FACTORY_TOKEN": token, **(env or {})}
    argv = ["work", "--project", flow.project.slug, "--repo", str(clone), *args]
    if not process:
        return factory_in_process(*argv, env=environ, timeout=timeout)
    environ = {**os.environ, **environ}
    environ.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run(
        [FACTORY, *argv], env=environ, capture_output=True, text=True, timeout=timeout
    )


def test_a_scripted_agent_that_fixes_the_failing_test_reaches_review(live_server, project, clone):
    task = project.ready(title="Claims respect dependencies", allowed_paths=["**"])

    run = factory_work(live_server, project, clone, "--", *AGENT, "fix", process=True)

    assert run.returncode == 0, run.stdout + run.stderr
    task.refresh_from_db()
    assert task.state == "in_review"
    attempt = task.current_attempt
    assert attempt.summary.startswith("Claims respect dependencies again")
    assert GateRun.objects.get(attempt=attempt, gate="runner").state == "passed"
    assert sorted(attempt.evidence.filter(provenance="agent").values_list("kind", flat=True)) == [
        "diff",
        "junit",
        "log",
    ]
    lines = run.stdout.splitlines()
    assert (
        lines[0]
        == f"factory work: claimed {task.key} (Claims respect dependencies), attempt {attempt.pk}"
    )
    assert lines[-1].startswith(
        f"factory work: {task.key} submitted at {attempt.change['commit'][:12]}"
    )
    branch = f"factory/{task.key}/attempt-1"
    assert (
        sh(clone.parent / "origin.git", "git", "rev-parse", branch).strip()
        == attempt.change["commit"]
    )


def test_an_agent_is_told_when_its_earlier_change_came_back_from_landing(
    live_server, project, clone
):
    policy = project.project.gate_policy
    project.gates({})  # straight to review: the lander itself finds what is wrong
    project.project.landing = {
        "mode": "push",
        "method": "squash",
        "batch_max": 4,
        "target_branch": "",
    }
    project.project.save(update_fields=["landing"])
    task, attempt = project.in_review(title="Claims respect dependencies", allowed_paths=["**"])
    review.task_approve(task=task, actor=project.reviewer)  # the lander runs on commit
    task.refresh_from_db()
    attempt.refresh_from_db()
    assert (task.state, attempt.landing["state"]) == ("ready", "failed")
    project.gates(policy)

    run = factory_work(live_server, project, clone, "--", *AGENT, "fix")

    assert run.returncode == 0, run.stdout + run.stderr
    said = [line for line in run.stdout.splitlines() if "came back from landing" in line]
    assert said == [
        "factory work: attempt #1 was approved but came back from landing: landing failed: "
        "the approved commit abc123000000 is not in the repository any more; push it again and "
        "submit a new attempt"
    ]


def test_every_step_is_one_json_object_with_json(live_server, project, clone):
    project.ready(title="A task", allowed_paths=["**"])

    run = factory_work(live_server, project, clone, "--json", "--", *AGENT, "fix")

    steps = [json.loads(line)["step"] for line in run.stdout.splitlines()]
    assert steps[:4] == ["claimed", "workspace", "brief", "agent"]
    assert steps[-1] == "submit"


def test_nothing_to_claim_exits_0_and_says_so(live_server, project, clone):
    run = factory_work(live_server, project, clone, "--", *AGENT, "fix")

    assert (run.returncode, run.stdout) == (0, "factory work: nothing to claim\n")


def test_a_crashing_agents_task_is_released_with_its_exit_code(live_server, project, clone):
    task = project.ready(title="A task", allowed_paths=["**"])

    run = factory_work(live_server, project, clone, "--", *AGENT, "crash")

    assert run.returncode == 4
    task.refresh_from_db()
    attempt = Attempt.objects.get(task=task)
    assert (task.state, attempt.state, attempt.end_reason) == (
        "ready",
        "released",
        "the agent exited 3",
    )


def test_an_agent_that_changes_nothing_releases_the_task(live_server, project, clone):
    task = project.ready(title="A task", allowed_paths=["**"])

    run = factory_work(live_server, project, clone, "--", *AGENT, "nothing")

    assert run.returncode == 4
    assert Attempt.objects.get(task=task).end_reason == "the agent changed nothing"


def test_a_blocked_agent_blocks_the_task_with_its_reason(live_server, project, clone):
    task = project.ready(title="A task", allowed_paths=["**"])

    run = factory_work(live_server, project, clone, "--", *AGENT, "blocked")

    assert run.returncode == 4
    task.refresh_from_db()
    assert (task.state, Attempt.objects.get(task=task).end_reason) == (
        "blocked",
        "The spec contradicts FM-D1.",
    )


def test_a_hanging_agent_that_loses_its_lease_is_stopped(live_server, project, clone, tmp_path):
    task = project.ready(title="A task", allowed_paths=["**"])
    pid_file = tmp_path / "agent.pid"

    def expire_when_running():
        deadline = time.monotonic() + 60
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        attempt = Attempt.objects.get(task=task)
        expire_lease(attempt)
        attempts.attempt_expire(attempt=attempt)

    expirer = threading.Thread(target=expire_when_running)
    expirer.start()
    run = factory_work(
        live_server,
        project,
        clone,
        "--lease",
        "3",
        "--grace",
        "1",
        "--",
        *AGENT,
        "hang",
        env={"AGENT_PID_FILE": str(pid_file)},
    )
    expirer.join()

    assert run.returncode == 5, run.stdout + run.stderr
    assert "lease lost (lease_lost" in run.stdout
    pid = int(pid_file.read_text())
    assert (
        not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    )
    assert Attempt.objects.get(task=task).state == "abandoned"


def test_a_second_run_resumes_from_the_first_runs_checkpoint(live_server, project, clone):
    task = project.ready(title="A task", allowed_paths=["**"])
    first = factory_work(live_server, project, clone, "--", *AGENT, "checkpoint")

    second = factory_work(live_server, project, clone, "--", *AGENT, "resume")

    assert (first.returncode, second.returncode) == (4, 0)
    assert "checkpoint saved (revision 1)" in first.stdout
    assert "resuming from the checkpoint of attempt #1" in second.stdout
    log = (clone / ".factory" / "logs" / f"{task.key}-attempt-2.log").read_text()
    assert 'checkpoint: {\n  "step": "half way"\n}' in log


def test_loop_empties_a_queue_of_five_tasks(live_server, project, clone):
    project.gates({})
    tasks = [project.ready(title=f"Task {n}", allowed_paths=["tasks/**"]) for n in range(5)]

    run = factory_work(
        live_server,
        project,
        clone,
        "--loop",
        "--max-tasks",
        "5",
        "--poll",
        "0.5",
        "--",
        *AGENT,
        "touch",
    )

    assert run.returncode == 0, run.stdout + run.stderr
    assert set(
        Task.objects.filter(pk__in=[t.pk for t in tasks]).values_list("state", flat=True)
    ) == {"in_review"}
    assert run.stdout.count(" submitted at ") == 5


def test_a_repository_with_uncommitted_changes_is_refused_before_any_claim(
    live_server, project, clone
):
    task = project.ready(title="A task", allowed_paths=["**"])
    (clone / "claimqueue.py").write_text("# half-done\n")

    run = factory_work(live_server, project, clone, "--", *AGENT, "fix")

    assert run.returncode == 2
    assert run.stdout == (
        f"factory work: {clone} has uncommitted changes (claimqueue.py); "
        "commit or stash them before factory work\n"
    )
    task.refresh_from_db()
    assert task.state == "ready"


def test_ctrl_c_releases_the_task_as_interrupted_and_exits_130(
    live_server, project, clone, tmp_path
):
    task = project.ready(title="A task", allowed_paths=["**"])
    pid_file = tmp_path / "agent.pid"
    token = AuthToken.objects.create(user=project.agent)[1]
    environ = {**os.environ, "FACTORY_URL": live_server.url, "FACTORY_TOKEN": token}
    environ.update(AGENT_PID_FILE=str(pid_file))
    environ.pop("DJANGO_SETTINGS_MODULE", None)
    loop = subprocess.Popen(
        [FACTORY, "work", "--repo", str(clone), "--grace", "1", "--", *AGENT, "hang"],
        env=environ,
        stdout=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)

    loop.send_signal(signal.SIGINT)
    out, _ = loop.communicate(timeout=60)

    assert loop.returncode == 130, out
    assert out.splitlines()[-1] == "factory work: interrupted; the task was released"
    task.refresh_from_db()
    assert (task.state, Attempt.objects.get(task=task).end_reason) == ("ready", "interrupted")


def test_a_push_the_remote_refuses_releases_the_task(live_server, project, clone, origin):
    hook = origin / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'pushes are closed today' >&2\nexit 1\n")
    hook.chmod(0o755)
    task = project.ready(title="A task", allowed_paths=["**"])

    run = factory_work(live_server, project, clone, "--", *AGENT, "fix")

    assert run.returncode == 4
    reason = Attempt.objects.get(task=task).end_reason
    assert reason.startswith("push refused: ")
    assert "unfinished work kept on branch factory/" not in run.stdout  # it was committed


def test_a_change_outside_the_allowed_paths_is_submitted_and_diff_scope_says_no(
    live_server, project, clone
):
    task = project.ready(title="A task", allowed_paths=["tasks/**"])

    run = factory_work(live_server, project, clone, "--", *AGENT, "fix")

    assert run.returncode == 0
    task.refresh_from_db()
    scope = GateRun.objects.get(attempt__task=task, gate="diff-scope")
    assert (task.state, scope.state, scope.verdict["outside"]) == (
        "ready",
        "failed",
        ["claimqueue.py"],
    )


def test_an_agent_that_deletes_factory_still_gets_its_work_submitted(live_server, project, clone):
    task = project.ready(title="A task", allowed_paths=["**"])

    run = factory_work(live_server, project, clone, "--", *AGENT, "wipe")

    assert run.returncode == 0, run.stdout + run.stderr
    task.refresh_from_db()
    assert task.state == "in_review"
    assert task.current_attempt.summary == f"{task.key}: A task"  # no summary.md was left


class Outage:
    """A TCP forwarder to the live server that can go away for a while, as in a restart:
    while down, open connections are cut and new ones are closed at once."""

    def __init__(self, target: str):
        host, port = target.rsplit("//", 1)[1].split(":")
        self.target = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.up, self.open, self.refused = threading.Event(), [], 0
        self.up.set()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            client, _ = self.listener.accept()
            if not self.up.is_set():
                client.close()
                self.refused += 1
                continue
            server = socket.create_connection(self.target)
            self.open += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source, sink):
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def down(self):
        self.up.clear()
        for end in self.open:
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
        self.open = []


def test_a_server_away_mid_task_is_waited_for(live_server, project, clone, tmp_path):
    task = project.ready(title="A task", allowed_paths=["**"])
    pid_file, outage = tmp_path / "agent.pid", Outage(live_server.url)

    def restart_while_the_agent_works():
        deadline = time.monotonic() + 60
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        outage.down()
        time.sleep(6)  # the agent ends after 3 s: evidence and the submit meet the outage
        outage.up.set()

    restarter = threading.Thread(target=restart_while_the_agent_works)
    restarter.start()
    run = factory_work(
        type("Server", (), {"url": outage.url}),
        project,
        clone,
        "--",
        *AGENT,
        "slow",
        env={"AGENT_PID_FILE": str(pid_file)},
    )
    restarter.join()

    assert run.returncode == 0, run.stdout + run.stderr
    assert outage.refused > 0  # calls met the outage, and were made again
    task.refresh_from_db()
    assert task.state == "in_review"


# --- links: factory work neither writes nor reads through one ------------------------------


def commit_links(repo, links, *, push=None):
    """Commit symbolic links (``{path: target}``) on main in ``repo``, then push them to
    ``push`` when given (so the project's main holds them, not the agent's checkout)."""
    for name, target in links.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).symlink_to(target)
    sh(repo, "git", "add", *links)
    sh(repo, "git", "-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qm", "links")
    if push:
        sh(repo, "git", "push", "-q", str(push), "HEAD:main")
    return sh(repo, "git", "rev-parse", "HEAD").strip()


@pytest.fixture
def secret(tmp_path):
    """A file outside the repository that a link could lead to (authorized_keys, a key)."""
    path = tmp_path / "outside" / "authorized_keys"
    path.parent.mkdir()
    path.write_text('{"token": "ssh-ed25519 SECRET"}\n')
    return path


def test_brief_is_not_written_through_a_committed_link(
    live_server, project, clone, upstream, origin, secret
):
    task = project.ready(title="A task", allowed_paths=["**"])
    base = commit_links(upstream, {".factory/brief.md": secret}, push=origin)

    run = factory_work(live_server, project, clone, "--", *AGENT, "fix")

    assert run.returncode == 4, run.stdout + run.stderr
    assert secret.read_text() == '{"token": "ssh-ed25519 SECRET"}\n'
    attempt = Attempt.objects.get(task=task)
    assert (attempt.state, attempt.end_reason) == (
        "released",
        f"the project's main ({base[:12]}) tracks .factory/ (.factory/brief.md); factory work "
        "keeps its own files there and does not work in a repository that commits them",
    )


def test_a_factory_folder_committed_as_a_link_is_refused_naming_it(
    live_server, project, clone, upstream, origin, secret
):
    task = project.ready(title="A task", allowed_paths=["**"])
    commit_links(upstream, {".factory": secret.parent}, push=origin)

    run = factory_work(live_server, project, clone, "--", *AGENT, "fix")

    assert run.returncode == 4
    assert sorted(p.name for p in secret.parent.iterdir()) == ["authorized_keys"]
    reason = Attempt.objects.get(task=task).end_reason
    assert reason.startswith("the project's main (") and "tracks .factory/ (.factory);" in reason


def test_tracked_factory_folder_in_the_checkout_is_refused_before_any_claim(
    live_server, project, clone, secret
):
    task = project.ready(title="A task", allowed_paths=["**"])
    commit_links(clone, {f".factory/logs/{task.key}-attempt-1.log": secret})

    run = factory_work(live_server, project, clone, "--", *AGENT, "fix")

    assert run.returncode == 2
    assert run.stdout == (
        f"factory work: {clone} tracks .factory/ (.factory/logs/{task.key}-attempt-1.log); "
        "factory work keeps its own files there and does not work in a repository that "
        "commits them\n"
    )
    assert secret.read_text() == '{"token": "ssh-ed25519 SECRET"}\n'
    task.refresh_from_db()
    assert (task.state, Attempt.objects.filter(task=task).count()) == ("ready", 0)


def test_a_factory_link_left_in_the_checkout_is_refused_before_any_claim(
    live_server, project, clone, secret
):
    task = project.ready(title="A task", allowed_paths=["**"])
    (clone / ".factory").symlink_to(secret.parent)

    run = factory_work(live_server, project, clone, "--", *AGENT, "fix")

    assert (run.returncode, run.stdout) == (
        2,
        f"factory work: {clone}: .factory is a link; links are not followed\n",
    )
    assert sorted(p.name for p in secret.parent.iterdir()) == ["authorized_keys"]
    assert Attempt.objects.filter(task=task).count() == 0


@pytest.mark.parametrize("name", ["summary.md", "blocked.md", "checkpoint.json"])
def test_a_link_the_agent_leaves_in_factory_is_not_read(live_server, project, clone, secret, name):
    task = project.ready(title="A task", allowed_paths=["**"])

    run = factory_work(
        live_server,
        project,
        clone,
        "--",
        *AGENT,
        "link",
        name,
        env={"AGENT_LINK_TARGET": str(secret)},
    )

    assert run.returncode == 4, run.stdout + run.stderr
    task.refresh_from_db()
    attempt = Attempt.objects.get(task=task)
    assert (task.state, attempt.state, attempt.end_reason) == (
        "ready",
        "released",
        f".factory/{name} is a link; links are not followed",
    )
    assert (attempt.summary, attempt.checkpoint, attempt.evidence.count()) == ("", None, 0)
    assert "SECRET" not in run.stdout


def test_a_fifo_the_agent_leaves_as_its_summary_is_refused_without_waiting(
    live_server, project, clone
):
    task = project.ready(title="A task", allowed_paths=["**"])

    run = factory_work(live_server, project, clone, "--", *AGENT, "fifo", "summary.md", timeout=60)

    assert run.returncode == 4, run.stdout + run.stderr
    attempt = Attempt.objects.get(task=task)
    assert (attempt.state, attempt.end_reason, attempt.summary) == (
        "released",
        ".factory/summary.md is not a regular file",
        "",
    )


def test_junit_behind_a_committed_link_is_not_attached(
    live_server, project, clone, upstream, origin, secret
):
    project.gates({})
    task = project.ready(title="A task", allowed_paths=["**"])
    commit_links(upstream, {"reports": secret.parent}, push=origin)

    run = factory_work(live_server, project, clone, "--", *AGENT, "fix")

    assert run.returncode == 0, run.stdout + run.stderr
    assert "factory work: junit not attached: reports is a link; links are not followed" in (
        run.stdout
    )
    attempt = Attempt.objects.get(task=task)
    assert sorted(attempt.evidence.values_list("kind", flat=True)) == ["diff", "log"]


@pytest.mark.parametrize("where", ["absolute", "relative"])
def test_a_junit_path_outside_the_workspace_is_not_read(live_server, project, clone, secret, where):
    junit = str(secret) if where == "absolute" else "../../../../outside/authorized_keys"
    # The site refuses such a path; the client does not trust the site to (an old record,
    # a site taken over).
    Project.objects.filter(pk=project.project.pk).update(verify={**VERIFY, "junit": junit})
    project.gates({})
    task = project.ready(title="A task", allowed_paths=["**"])

    run = factory_work(live_server, project, clone, "--", *AGENT, "fix")

    assert run.returncode == 0, run.stdout + run.stderr
    assert f"junit not attached: {junit} is not a plain path inside the directory" in run.stdout
    attempt = Attempt.objects.get(task=task)
    assert sorted(attempt.evidence.values_list("kind", flat=True)) == ["diff", "log"]


def test_the_agents_usage_and_the_wall_time_reach_the_attempt(live_server, project, clone):
    task = project.ready(title="A task", allowed_paths=["**"])
    usage = {"model": "m-1", "input_tokens": 1200, "output_tokens": 300, "cost_usd": "0.42"}

    run = factory_work(
        live_server, project, clone, "--", *AGENT, "fix", env={"AGENT_USAGE": json.dumps(usage)}
    )

    assert run.returncode == 0, run.stdout + run.stderr
    attempt = Attempt.objects.get(task=task)
    wall = attempt.usage.pop("wall_seconds")
    assert attempt.usage == {
        **usage,
        "models": ["m-1"],
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "priced_cost_usd": "0.00",
        "by_model": {
            "m-1": {
                "input_tokens": 1200,
                "output_tokens": 300,
                "cache_read_tokens": 0,
                "cache_write_tokens": 0,
                "cost_usd": "0.42",
                "priced_cost_usd": None,
            }
        },
    }
    assert wall > 0


def test_an_agent_past_its_tasks_budget_is_stopped(live_server, project, clone, tmp_path):
    task = project.ready(title="A task", allowed_paths=["**"], budget_usd="0.10")

    run = factory_work(
        live_server,
        project,
        clone,
        "--lease",
        "3",
        "--",
        *AGENT,
        "hang",
        env={"AGENT_USAGE": '{"cost_usd": 0.5}', "AGENT_PID_FILE": str(tmp_path / "pid")},
    )

    assert run.returncode == 5, run.stdout + run.stderr
    task.refresh_from_db()
    attempt = Attempt.objects.get(task=task)
    assert (task.state, attempt.state, attempt.usage["cost_usd"]) == ("ready", "abandoned", "0.50")
    assert attempt.end_reason.startswith("budget exhausted: this attempt's self-reported cost 0.50")
    assert "lease lost (budget_exhausted: budget exhausted" in run.stdout
