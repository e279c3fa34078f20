"""The ``factory`` command against a live server, as an agent would run it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from knox.models import AuthToken

from tasks.models import Task
from tests.factories import expire_lease

FACTORY = str(Path(sys.executable).parent / "factory")
JUNIT = (
    "<testsuite tests='1'><testcase classname='tests.test_claim' name='test_claim'/></testsuite>"
)


def token_for(user):
    return AuthToken.objects.create(user=user)[1]


def factory(live_server, user, *args):
    env = {**os.environ, "FACTORY_URL": live_server.url, "FACTORY_TOKEN": token_for(user)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run([FACTORY, *args], env=env, capture_output=True, text=True, timeout=60)


def factory_json(live_server, user, *args):
    run = factory(live_server, user, "--json", *args)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@pytest.mark.django_db(transaction=True)
def test_an_agent_works_a_task_from_claim_to_review(live_server, flow, tmp_path):
    flow.gates({"tests-pass": {}})
    task = flow.ready(spec=flow.spec(), title="Claim endpoint")
    report = tmp_path / "junit.xml"
    report.write_text(JUNIT)

    claimed = factory_json(live_server, flow.agent, "claim", "--lease", "600")
    attempt = str(claimed["attempt"]["id"])
    bundle = factory_json(live_server, flow.agent, "context", task.key)
    beat = factory(live_server, flow.agent, "heartbeat", attempt)
    saved = factory_json(
        live_server, flow.agent, "checkpoint", attempt, "--set", '{"step": 1}', "--revision", "0"
    )
    evidence = factory_json(
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
    decided = factory_json(
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
    submitted = factory_json(
        live_server, flow.agent, "submit", attempt, "--summary", "Done", "--commit", "abcdef1"
    )
    checked = factory_json(live_server, flow.reviewer, "tasks", "--project", "FM")[0]["state"]
    reviewed = factory(live_server, flow.reviewer, "review", task.key, "approve")

    assert claimed["task"]["key"] == task.key
    assert bundle["spec"]["criteria"][0]["key"] == "AC-1"
    assert beat.returncode == 0 and beat.stdout.startswith("Lease until ")
    assert saved["revision"] == 1
    assert (evidence["kind"], evidence["criteria"]) == ("junit", ["AC-1"])
    assert decided["key"] == "FM-D1"
    assert (submitted["state"], submitted["change"]) == ("checking", {"commit": "abcdef1"})
    assert checked == "in_review"  # the tests-pass gate ran (eagerly) on the JUnit report
    assert (reviewed.returncode, reviewed.stdout.strip()) == (0, f"{task.key} is done")
    assert Task.objects.get(pk=task.pk).state == "done"


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
