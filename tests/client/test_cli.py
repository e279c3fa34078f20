"""The ``factory`` command against a live server, as an agent would run it."""

import json
import os
import socket
import subprocess
import sys
import tomllib
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from unittest import mock

import pytest
from knox.models import AuthToken

from decisions.models import Decision
from interop.models import ImportRun
from landing.services import revert_request
from tasks import review
from tasks.landing import task_land
from tasks.models import Attempt, Task
from tests.client.conftest import factory_in_process
from tests.factories import expire_lease
from tests.serving import serve_in_thread

# The client decides by the API's answers, which the API's own tests check on both engines;
# its calls here reach the database only through them (ADR 0015, "engine_neutral").
pytestmark = pytest.mark.engine_neutral

FACTORY = str(Path(sys.executable).parent / "factory")
ROOT = Path(__file__).resolve().parents[2]
JUNIT = (
    "<testsuite tests='1'><testcase classname='tests.test_claim' name='test_claim'/></testsuite>"
)


def token_for(user):
    return AuthToken.objects.create(user=user)[1]


def factory_process(live_server, user, *args):
    """The installed ``factory`` command, a process of its own."""
    env = {**os.environ, "FACTORY_URL": live_server.url, "FACTORY_TOKEN": token_for(user)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run([FACTORY, *args], env=env, capture_output=True, text=True, timeout=60)


def factory(live_server, user, *args):
    env = {"FACTORY_URL": live_server.url, "FACTORY_TOKEN": token_for(user)}
    return factory_in_process(*args, env=env)


def answer(run) -> dict | list:
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def factory_json(live_server, user, *args):
    return answer(factory(live_server, user, "--json", *args))


def process_json(live_server, user, *args):
    return answer(factory_process(live_server, user, "--json", *args))


# The installed command, a process per call, from claim to review; the other tests call its
# main() in this process (factory_in_process).
@pytest.mark.django_db(transaction=True)
def test_an_agent_works_a_task_from_claim_to_review(live_server, flow, tmp_path):
    flow.gates({"tests-pass": {}})
    task = flow.ready(spec=flow.spec(), title="Claim endpoint")
    report = tmp_path / "junit.xml"
    report.write_text(JUNIT)

    claimed = process_json(live_server, flow.agent, "claim", "--lease", "600")
    attempt = str(claimed["attempt"]["id"])
    bundle = process_json(live_server, flow.agent, "context", task.key)
    beat = factory_process(live_server, flow.agent, "heartbeat", attempt)
    saved = process_json(
        live_server, flow.agent, "checkpoint", attempt, "--set", '{"step": 1}', "--revision", "0"
    )
    evidence = process_json(
        live_server,
        flow.agent,
        "evidence",
        attempt,
        str(report),
        "--kind",
        "junit",
        "--criteria",
        "AC-1",
    )
    decided = process_json(
        live_server,
        flow.agent,
        "decide",
        attempt,
        "--title",
        "T",
        "--context",
        "C",
        "--decision",
        "D",
    )
    submitted = process_json(
        live_server,
        flow.agent,
        "submit",
        attempt,
        "--summary",
        "Done",
        "--commit",
        "abcdef1000000000000000000000000000000000",
    )
    checked = process_json(live_server, flow.reviewer, "tasks", "--project", "FM")[0]["state"]
    marks = ["--criterion", "AC-2=na:no screen in this change", "--criterion", "AC-3=met"]
    reviewed = factory_process(live_server, flow.reviewer, "review", task.key, "approve", *marks)

    assert claimed["task"]["key"] == task.key
    assert bundle["spec"]["criteria"][0]["key"] == "AC-1"
    assert beat.returncode == 0 and beat.stdout.startswith("Lease until ")
    assert saved["revision"] == 1
    assert (evidence["kind"], evidence["criteria"]) == ("junit", ["AC-1"])
    assert decided["key"] == "FM-D1"
    assert (submitted["state"], submitted["change"]) == (
        "checking",
        {"commit": "abcdef1000000000000000000000000000000000"},
    )
    assert checked == "in_review"  # the tests-pass gate ran (eagerly) on the JUnit report
    assert (reviewed.returncode, reviewed.stdout.strip()) == (0, f"{task.key} is done")
    done = Task.objects.get(pk=task.pk)
    assert done.state == "done"
    assert [
        (c["key"], c["verdict"], c["note"]) for c in done.current_attempt.criteria_verdicts
    ] == [
        ("AC-1", "met", ""),
        ("AC-2", "na", "no screen in this change"),
        ("AC-3", "met", ""),
    ]


@pytest.mark.django_db(transaction=True)
def test_a_refusal_exits_1_with_the_api_code(live_server, flow):
    _, attempt = flow.claimed()
    expire_lease(attempt)

    run = factory(live_server, flow.agent, "heartbeat", str(attempt.pk))

    assert run.returncode == 1
    assert run.stderr.startswith("lease_lost: the lease on attempt ")


@pytest.mark.django_db(transaction=True)
def test_an_agent_token_cannot_review(live_server, flow):
    flow.gates({})
    task, _ = flow.in_review()

    run = factory(live_server, flow.agent2, "review", task.key, "approve")

    assert (run.returncode, run.stderr.split(":")[0]) == (1, "permission_denied")
    assert Task.objects.get(pk=task.pk).state == "in_review"


@pytest.mark.django_db(transaction=True)
def test_claim_with_nothing_to_do_says_so(live_server, flow):
    run = factory(live_server, flow.agent, "claim")

    assert (run.returncode, run.stdout.strip()) == (0, "No claimable task.")


@pytest.mark.django_db(transaction=True)
def test_the_list_commands_print_one_line_each(live_server, flow):
    flow.ready(title="first")
    flow.draft(title="second")

    run = factory(live_server, flow.manager, "tasks", "--project", "FM")

    assert run.stdout.splitlines() == [
        "FM-1       ready      first",
        "FM-2       draft      second",
    ]


def test_no_token_is_a_clear_error():
    env = {k: v for k, v in os.environ.items() if k != "FACTORY_TOKEN"}

    run = subprocess.run([FACTORY, "tasks"], env=env, capture_output=True, text=True, timeout=60)

    assert (run.returncode, run.stderr.strip()) == (
        1,
        "no_token: set FACTORY_TOKEN or pass --token",
    )


def test_the_client_does_not_import_django():
    code = "import sys, factory_client.cli; print('django' in sys.modules)"

    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)

    assert run.stdout.strip() == "False"


class AttemptOnly:
    """A client that knows one attempt, as the API answers it."""

    def __init__(self, answer):
        self.answer = answer

    def attempt(self, attempt):
        return self.answer


def test_attempt_prints_its_gates_and_the_runners_verdict(capsys):
    from factory_client.cli import build_parser

    answer = {
        "id": 7,
        "task": "RD-2",
        "number": 1,
        "state": "failed",
        "gate_runs": [{"gate": "runner", "state": "failed", "summary": "2 of 3 tests failed"}],
        "runner": {
            "state": "failed",
            "verified": True,
            "commit": "8fd028ed030e5308f7fc",
            "seconds": 0.31,
            "summary": "2 of 3 tests failed",
            "tests": {},
        },
    }
    args = build_parser().parse_args(["attempt", "7"])

    args.run(AttemptOnly(answer), args)

    assert capsys.readouterr().out.splitlines() == [
        "Attempt 7 of RD-2 (#1): failed",
        "  runner               failed   2 of 3 tests failed",
        "runner: failed at 8fd028ed030e in 0.3 s: 2 of 3 tests failed",
    ]


def test_attempt_says_when_nothing_was_verified(capsys):
    from factory_client.cli import runner_line

    unverified = {"state": "passed", "verified": False, "summary": "not verified: no sandbox"}

    assert runner_line(None) == "runner: not in this project's gate policy"
    assert runner_line(unverified) == "runner: passed, not verified (not verified: no sandbox)"


def factory_alone(*args, url="http://127.0.0.1:9"):
    """``factory`` with a token, against ``url`` (by default a port nothing listens on)."""
    return factory_in_process(*args, env={"FACTORY_URL": url, "FACTORY_TOKEN": "fm_unused"})


@contextmanager
def answering(status, content_type, body):
    """A server at 127.0.0.1 that answers every POST with ``status`` and ``body``."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    serve_in_thread(server)
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.django_db(transaction=True)
def test_json_goes_after_the_subcommand_too(live_server, flow):
    flow.ready(title="first")

    before = factory_json(live_server, flow.manager, "tasks", "--project", "FM")
    after = factory(live_server, flow.manager, "tasks", "--project", "FM", "--json")

    assert after.returncode == 0, after.stderr
    assert json.loads(after.stdout) == before
    assert [(task["key"], task["title"]) for task in before] == [("FM-1", "first")]


def test_every_subcommand_takes_json_and_json_is_always_set():
    from factory_client.cli import build_parser
    from factory_client.completion import walk

    parser = build_parser()
    _, commands = walk(parser)

    assert [command.name for command in commands if "--json" not in command.options] == []
    assert parser.parse_args(["tasks"]).json is False
    assert parser.parse_args(["--json", "tasks"]).json is True
    assert parser.parse_args(["tasks", "--json"]).json is True


def test_version_is_the_client_distributions():
    pyproject = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())

    run = factory_alone("--version")

    assert (run.returncode, run.stdout, run.stderr) == (
        0,
        f"factory {pyproject['project']['version']}\n",
        "",
    )


def test_help_lists_the_exit_codes():
    run = factory_alone("--help")

    assert run.stdout.split("exit codes:\n", 1)[1].splitlines() == [
        "  0  done",
        "  1  refused by the API (a 4xx answer), or no token",
        "  2  usage error",
        "  3  the server could not be reached, or answered 5xx",
        "  4  factory work: the task was released (the agent failed, changed nothing, was blocked,",
        "     or the push was refused)",
        "  5  factory work: the lease was lost and the agent stopped",
        "  6  factory wait: the timeout passed before the task reached the states",
        "  130, 143  factory work: interrupted (Ctrl-C) or terminated; the task was released",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "factory: error: the following arguments are required: command"),
        (["claim", "--lease", "soon"], "factory claim: error: argument --lease: invalid int value"),
        (["checkpoint", "1", "--set", "{"], "factory checkpoint: error: argument --set: not JSON"),
        (["review", "FM-1", "maybe"], "factory review: error: argument verdict: invalid choice"),
        (
            ["review", "FM-1", "approve", "--criterion", "AC-3"],
            "factory review: error: argument --criterion: 'AC-3': write KEY=met, KEY=not_met",
        ),
    ],
)
def test_bad_usage_exits_2_before_any_call(args, message):
    run = factory_alone(*args)  # the server's port is closed: a call would exit 3

    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr.splitlines()[0].startswith("usage: factory")
    assert run.stderr.splitlines()[-1].startswith(message)


def test_an_unreachable_server_exits_3_with_one_line():
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound and never listening: connections are refused
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"

        run = factory_alone("claim", url=url)

    assert (run.returncode, run.stdout) == (3, "")
    assert len(run.stderr.splitlines()) == 1
    assert run.stderr.startswith(f"unreachable: {url}: ")


@pytest.mark.parametrize(
    ("status", "content_type", "body", "message"),
    [
        (500, "application/json", b'{"code": "boom", "detail": "it\\nbroke"}', "boom: it broke"),
        (200, "text/html", b"<html>a web site</html>", "bad_response: {url} answered 200 "),
    ],
)
def test_a_server_error_or_not_the_api_exits_3_with_one_line(status, content_type, body, message):
    with answering(status, content_type, body) as url:
        run = factory_alone("claim", url=url)

    assert (run.returncode, run.stdout) == (3, "")
    assert len(run.stderr.splitlines()) == 1
    assert run.stderr.startswith(message.format(url=url))


@pytest.mark.django_db(transaction=True)
def test_context_prints_the_markdown_brief_and_the_bundle_with_json(live_server, flow):
    task, _ = flow.claimed(spec=flow.spec(), title="Claim endpoint")

    brief = factory(live_server, flow.agent, "context", task.key, "--max-chars", "3000")
    bundle = factory_json(live_server, flow.agent, "context", task.key)

    assert (brief.returncode, brief.stderr) == (0, "")
    assert brief.stdout.startswith(f"# {task.key}: Claim endpoint\n\nState: claimed")
    assert "- AC-3 — Readable code. — needs a reviewer's approval\n" in brief.stdout
    assert brief.stdout.endswith(
        f"Bundle sha256 `{bundle['bundle_sha256']}`; budget 3000 characters.\n"
    )
    assert len(brief.stdout) <= 3000


@pytest.mark.django_db(transaction=True)
def test_a_manager_imports_a_folder_and_exports_it_back(live_server, flow, tmp_path):
    folder = Path(__file__).parents[1] / "fixtures" / "interop" / "madr" / "adr-madr"

    checked = factory(live_server, flow.manager, "import", "madr", str(folder), "--project", "FM")
    applied = factory_json(
        live_server, flow.manager, "import", "madr", str(folder), "--project", "FM", "--apply"
    )
    exported = factory(
        live_server, flow.agent, "export", "madr", "--project", "FM", "-o", str(tmp_path / "d.zip")
    )

    assert checked.returncode == 0
    first = ImportRun.objects.order_by("pk").first().pk  # pks are not reset between tests
    assert checked.stdout.startswith(
        f"Import #{first} into FM as adr-madr: dry run: nothing written (--apply writes it)."
    )
    assert (applied["state"], applied["report"]["counts"]["created"]) == ("applied", 19)
    assert exported.stdout.startswith(f"Wrote {tmp_path / 'd.zip'} (")
    assert Decision.objects.filter(project=flow.project).count() == 19


@pytest.mark.django_db(transaction=True)
def test_two_repositories_adr_folders_of_the_same_name_import_apart_by_origin_name(
    live_server, flow, tmp_path
):
    for repository, title in [("service-a", "Use Kafka"), ("service-b", "Use gRPC")]:
        folder = tmp_path / repository / "docs" / "decisions"
        folder.mkdir(parents=True)
        (folder / "0013-x.md").write_text(f"# {title}\n\n* Status: accepted\n")

    runs = [
        factory_json(
            live_server,
            flow.manager,
            "import",
            "madr",
            str(tmp_path / name / "docs" / "decisions"),
            "--project",
            "FM",
            "--origin-name",
            name,
            "--apply",
        )
        for name in ("service-a", "service-b", "service-a")
    ]

    assert [run["report"]["counts"]["created"] for run in runs] == [1, 1, 0]
    assert runs[2]["report"]["counts"]["unchanged"] == 1
    assert sorted(Decision.objects.values_list("origin", "title")) == [
        ("madr:service-a:0013", "Use Kafka"),
        ("madr:service-b:0013", "Use gRPC"),
    ]


@pytest.mark.django_db(transaction=True)
def test_evidence_named_by_a_link_is_not_sent(live_server, flow, tmp_path):
    flow.ready(title="A task")
    secret = tmp_path / "id_rsa"
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (tmp_path / "junit.xml").symlink_to(secret)
    attempt = factory_json(live_server, flow.agent, "claim")["attempt"]["id"]

    run = factory(
        live_server,
        flow.agent,
        "evidence",
        str(attempt),
        str(tmp_path / "junit.xml"),
        "--kind",
        "junit",
    )

    assert (run.returncode, run.stderr) == (
        1,
        f"invalid: {tmp_path / 'junit.xml'} is a link; links are not followed\n",
    )
    assert Attempt.objects.get(pk=attempt).evidence.count() == 0


@pytest.mark.django_db(transaction=True)
def test_export_is_not_written_through_a_link(live_server, flow, tmp_path):
    kept = tmp_path / "authorized_keys"
    kept.write_text("ssh-ed25519 AAAA owner\n")
    (tmp_path / "d.zip").symlink_to(kept)

    run = factory(
        live_server, flow.agent, "export", "madr", "--project", "FM", "-o", str(tmp_path / "d.zip")
    )

    assert (run.returncode, run.stderr) == (
        1,
        f"invalid: {tmp_path / 'd.zip'} is a link; links are not followed\n",
    )
    assert kept.read_text() == "ssh-ed25519 AAAA owner\n"


@pytest.mark.django_db(transaction=True)
def test_landing_shows_the_queue_and_a_manager_dequeues_from_it(live_server, flow):
    flow.project.landing = {"mode": "push", "method": "merge", "batch_max": 2, "target_branch": ""}
    flow.project.save(update_fields=["landing"])
    flow.gates({})
    task, attempt = flow.in_review(title="Land me")
    with mock.patch("projects.queue.enqueue"):  # no lander: the change stays queued
        review.task_approve(task=task, actor=flow.reviewer)

    shown = factory(live_server, flow.agent, "landing", "--project", "FM")
    refused = factory(live_server, flow.agent, "landing", "--project", "FM", "--dequeue", task.key)
    taken = factory(
        live_server,
        flow.manager,
        "landing",
        "--project",
        "FM",
        "--dequeue",
        task.key,
        "--to",
        "in_review",
        "--reason",
        "review it again",
    )

    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == [
        "Landing push (merge, batches of up to 2); 0 landed in the last hour",
        f"  1. {task.key:<10} queued   abc123000000  Land me",
    ]
    assert refused.returncode == 2
    assert refused.stderr.splitlines()[-1] == (
        "factory: error: landing --dequeue needs --reason: say why it leaves the queue"
    )
    assert (taken.returncode, taken.stdout) == (0, f"{task.key} is in_review\n")
    attempt.refresh_from_db()
    assert attempt.state == "passed"


@pytest.mark.django_db(transaction=True)
def test_a_manager_voids_an_attempts_usage_from_the_command_line(live_server, flow):
    from tasks import attempts

    task, attempt = flow.claimed()
    attempts.attempt_heartbeat(
        attempt=attempt, actor=flow.agent, usage={"cost_usd": "42", "input_tokens": 900}
    )

    blank = factory(live_server, flow.manager, "attempt", str(attempt.pk), "--void-usage", " ")
    refused = factory(live_server, flow.agent, "attempt", str(attempt.pk), "--void-usage", "mine")
    voided = factory(
        live_server, flow.manager, "attempt", str(attempt.pk), "--void-usage", "meter slipped"
    )

    assert blank.returncode == 2
    assert blank.stderr.splitlines()[-1] == (
        "factory: error: attempt --void-usage needs a reason: say why it should not count"
    )
    assert (refused.returncode, refused.stderr) == (
        1,
        "permission_denied: this needs the manager role in the project\n",
    )
    assert voided.returncode == 0, voided.stderr
    assert voided.stdout.splitlines() == [
        f"Attempt {attempt.pk} of {task.key} (#1): running",
        "voided by fm-manager: $42.00 reported until then counts toward no budget (meter slipped)",
    ]
    attempt.refresh_from_db()
    assert (attempt.usage_state, attempt.usage) == ("voided", {})


def test_attempt_prints_its_self_reported_usage_and_its_void():
    from factory_client.cli import usage_lines

    counted = {"cost_usd": "1.25", "input_tokens": 40, "output_tokens": 3, "voided": None}
    voided = {
        **counted,
        "voided": {"by": "maria", "reason": "meter", "usage": {"cost_usd": "90.00"}},
    }

    assert usage_lines(None) == []
    assert usage_lines({"cost_usd": "0.00", "input_tokens": 0, "voided": None}) == []
    assert usage_lines(counted) == ["usage: $1.25 self-reported, 40 tokens in, 3 out"]
    assert usage_lines(voided)[1] == (
        "voided by maria: $90.00 reported until then counts toward no budget (meter)"
    )


@pytest.mark.django_db(transaction=True)
def test_landing_says_who_paused_it_why_and_until_when_and_a_manager_resumes(live_server, flow):
    flow.project.landing = {"mode": "push", "method": "merge", "batch_max": 2, "target_branch": ""}
    flow.project.save(update_fields=["landing"])

    paused = factory(
        live_server,
        flow.manager,
        "landing",
        "--project",
        "FM",
        "--pause",
        "cutting 2.0",
        "--until",
        "2999-01-01T00:00:00Z",
    )
    shown = factory(live_server, flow.agent, "landing", "--project", "FM")
    refused = factory(live_server, flow.agent, "landing", "--project", "FM", "--resume")
    resumed = factory(live_server, flow.manager, "landing", "--project", "FM", "--resume")
    no_reason = factory(live_server, flow.manager, "landing", "--project", "FM", "--pause", " ")

    assert paused.returncode == 0, paused.stderr
    lines = shown.stdout.splitlines()
    assert lines[1].startswith(f"Paused by {flow.manager.username} since ")
    assert lines[1].endswith(" until 2999-01-01T00:00:00Z: cutting 2.0")
    assert refused.returncode != 0
    assert "manager" in refused.stderr
    assert resumed.returncode == 0, resumed.stderr
    assert "Paused" not in resumed.stdout
    assert no_reason.returncode == 2
    assert no_reason.stderr.splitlines()[-1] == (
        "factory: error: landing --pause needs a reason: say why landing pauses"
    )


@pytest.mark.django_db(transaction=True)
def test_landing_puts_a_task_in_the_fast_lane_and_shows_it_first(live_server, flow):
    flow.project.landing = {"mode": "push", "method": "merge", "batch_max": 2, "target_branch": ""}
    flow.project.save(update_fields=["landing"])
    flow.gates({})
    first, _ = flow.done(title="First")
    second, _ = flow.done(title="Second")

    fast = factory(
        live_server, flow.manager, "landing", "--project", "FM", "--fast", second.key,
        "--reason", "the outage fix", "--alone",
    )  # fmt: skip
    no_reason = factory(
        live_server, flow.manager, "landing", "--project", "FM", "--fast", first.key
    )
    refused = factory(
        live_server, flow.agent, "landing", "--project", "FM", "--fast", first.key, "--reason", "x"
    )

    assert fast.returncode == 0, fast.stderr
    queue = [line for line in fast.stdout.splitlines() if line[:4].strip().endswith(".")]
    assert queue[0].split()[1] == second.key
    assert queue[0].endswith("[fast lane: the outage fix]")
    assert queue[1].split()[1] == first.key
    assert no_reason.returncode == 2
    assert no_reason.stderr.splitlines()[-1] == (
        "factory: error: landing --fast needs --reason: say why it goes first"
    )
    assert refused.returncode != 0 and "manager" in refused.stderr


@pytest.mark.django_db(transaction=True)
def test_landing_queues_the_revert_of_a_landed_task(live_server, flow):
    flow.project.landing = {"mode": "push", "method": "squash", "batch_max": 2, "target_branch": ""}
    flow.project.save(update_fields=["landing"])
    flow.gates({})
    task, attempt = flow.done(title="Landed")
    task_land(attempt=attempt, commit="b" * 40, batch=None, seconds=1.0)

    reverted = factory(
        live_server, flow.manager, "landing", "--project", "FM", "--revert", task.key,
        "--reason", "it broke the export",
    )  # fmt: skip
    no_reason = factory(
        live_server, flow.manager, "landing", "--project", "FM", "--revert", task.key
    )

    assert reverted.returncode == 0, reverted.stderr
    assert reverted.stdout.strip() == f"the revert of {task.key} is queued"
    attempt.refresh_from_db()
    assert attempt.landing["revert"]["reason"] == "it broke the export"
    assert no_reason.returncode == 2
    assert no_reason.stderr.splitlines()[-1] == (
        "factory: error: landing --revert needs --reason: say why it is reverted"
    )


@pytest.mark.django_db(transaction=True)
def test_landing_cancels_the_queued_revert_of_a_landed_task(live_server, flow):
    flow.project.landing = {"mode": "push", "method": "squash", "batch_max": 2, "target_branch": ""}
    flow.project.save(update_fields=["landing"])
    flow.gates({})
    task, attempt = flow.done(title="Landed")
    task_land(attempt=attempt, commit="b" * 40, batch=None, seconds=1.0)
    revert_request(task=task, actor=flow.manager, reason="it broke the export")

    cancelled = factory(
        live_server, flow.manager, "landing", "--project", "FM", "--cancel-revert", task.key,
        "--reason", "the export broke on its own",
    )  # fmt: skip
    no_reason = factory(
        live_server, flow.manager, "landing", "--project", "FM", "--cancel-revert", task.key
    )

    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.strip() == f"the revert of {task.key} is cancelled; it stays done"
    attempt.refresh_from_db()
    assert attempt.revert_at is None
    assert attempt.landing["revert"]["cancelled"]["reason"] == "the export broke on its own"
    assert no_reason.returncode == 2
    assert no_reason.stderr.splitlines()[-1] == (
        "factory: error: landing --cancel-revert needs --reason: say why the revert is cancelled"
    )
