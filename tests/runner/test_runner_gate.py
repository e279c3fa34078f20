"""The runner as a gate: it verifies the submitted commit itself, and what it measured decides.

Each test drives a real git repository (demo/repository.py) through the real
services, with the runner's job run in the submitting thread (Celery eager).
"""

import threading
import time

import pytest

from demo.repository import FAILING_TEST, VERIFY, build
from demo.runner_demo import CLAIMED_JUNIT as PASSING_JUNIT
from demo.runner_demo import CRITERIA, POLICY
from evidence import services as evidence_services
from evidence.models import Evidence, GateRun
from projects import queue
from projects import services as project_services
from projects.models import Event
from projects.queue import BACKGROUND
from runner.jobs import verify_job
from tasks import attempts, context, reconciler
from tests.factories import submit_through_the_gates
from tests.runner.conftest import commit_files, orphan_commit

OPTIONAL = {**POLICY, "runner": {"required": False}}


@pytest.fixture
def repo(tmp_path):
    return build(tmp_path / "repo")


@pytest.fixture
def runner_flow(flow, repo):
    project_services.project_update(
        project=flow.project,
        actor=flow.manager,
        repository_url=repo.url,
        verify=VERIFY,
        gate_policy=POLICY,
    )
    flow.project.refresh_from_db()
    flow.spec_ = flow.spec(criteria=CRITERIA)
    return flow


def claimed(flow, **kwargs):
    return flow.claimed(spec=flow.spec_, allowed_paths=["**"], **kwargs)


def runs(attempt) -> dict:
    return {run.gate: run for run in GateRun.objects.filter(attempt=attempt)}


def test_an_honest_submission_reaches_review_on_the_runners_authoritative_evidence(
    runner_flow, repo, django_capture_on_commit_callbacks
):
    _, attempt = claimed(runner_flow)

    attempt = submit_through_the_gates(attempt, repo.honest, django_capture_on_commit_callbacks)

    assert (attempt.task.state, attempt.state) == ("in_review", "passed")
    runner = runs(attempt)["runner"]
    assert runner.summary.startswith(f"verified at {repo.honest[:12]} in ")
    assert runner.summary.endswith(" s (3 tests, 0 skipped)")
    measured = Evidence.objects.filter(attempt=attempt, provenance="runner")
    assert sorted((e.kind, e.authoritative) for e in measured) == [
        ("diff", True),
        ("junit", True),
        ("log", True),
    ]
    junit = measured.get(kind="junit")
    assert list(junit.criteria.values_list("key", flat=True)) == ["AC-1"]
    assert runs(attempt)["tests-pass"].verdict["decided_on"] == [junit.pk]


def test_the_runner_catches_an_agents_passing_junit_for_code_whose_tests_fail(
    runner_flow, repo, django_capture_on_commit_callbacks
):
    _, attempt = claimed(runner_flow)
    agents = runner_flow.attach(attempt, PASSING_JUNIT, kind="junit", name="junit.xml")

    attempt = submit_through_the_gates(
        attempt, repo.false_claim, django_capture_on_commit_callbacks
    )

    assert (attempt.task.state, attempt.state) == ("ready", "failed")
    gate = runs(attempt)
    assert gate["runner"].state == "failed"
    assert FAILING_TEST in gate["runner"].summary
    runners = Evidence.objects.get(attempt=attempt, provenance="runner", kind="junit")
    assert (gate["tests-pass"].verdict["decided_on"], gate["tests-pass"].verdict["set_aside"]) == (
        [runners.pk],
        [agents.pk],
    )
    assert gate["tests-pass"].summary == f"1 of 2 tests failed: {FAILING_TEST}"


def test_the_next_context_names_the_test_the_runner_saw_fail(
    runner_flow, repo, django_capture_on_commit_callbacks
):
    task, attempt = claimed(runner_flow)
    submit_through_the_gates(attempt, repo.false_claim, django_capture_on_commit_callbacks)
    second = attempts.task_claim(agent=runner_flow.agent2, project=runner_flow.project)

    bundle = context.build(task, current=second)

    (earlier,) = bundle["attempts"]
    gates = {gate["gate"]: gate for gate in earlier["gates"]}
    assert gates["tests-pass"]["summary"] == f"1 of 2 tests failed: {FAILING_TEST}"
    assert gates["runner"]["verdict"]["tests"]["failing"] == [FAILING_TEST]
    assert FAILING_TEST in gates["runner"]["summary"]


def test_a_submission_without_a_commit_is_refused_and_changes_nothing(
    runner_flow, django_capture_on_commit_callbacks
):
    task, attempt = claimed(runner_flow)
    events = Event.objects.count()

    with pytest.raises(Exception) as refused:
        attempts.attempt_submit(attempt=attempt, actor=attempt.agent, summary="done", change={})

    assert refused.value.message_dict == {
        "change.commit": ["this project's runner verifies each submission at its commit: name it"]
    }
    attempt.refresh_from_db()
    task.refresh_from_db()
    assert (task.state, attempt.state, GateRun.objects.count()) == ("claimed", "running", 0)
    assert Event.objects.count() == events


def test_the_other_gates_wait_for_the_runner(runner_flow, repo, django_capture_on_commit_callbacks):
    _, attempt = claimed(runner_flow)
    with django_capture_on_commit_callbacks(execute=False) as sent:
        attempts.attempt_submit(
            attempt=attempt, actor=attempt.agent, summary="done", change={"commit": repo.honest}
        )

    waiting = evidence_services.gate_run_execute(run=runs(attempt)["tests-pass"])

    assert len(sent) == 1  # the runner's job only
    assert (waiting.state, waiting.tries) == ("queued", 0)
    assert {gate: run.state for gate, run in runs(attempt).items()} == dict.fromkeys(
        POLICY, "queued"
    )


def test_the_runners_own_diff_decides_diff_scope_over_the_agents(
    runner_flow, repo, django_capture_on_commit_callbacks
):
    _, attempt = runner_flow.claimed(spec=runner_flow.spec_, allowed_paths=["tests/**"])
    inside = b"diff --git a/tests/x.py b/tests/x.py\n--- a/tests/x.py\n+++ b/tests/x.py\n@@ -1 +1 @@\n-a\n+b\n"
    runner_flow.attach(attempt, inside, kind="diff", name="change.diff")

    attempt = submit_through_the_gates(attempt, repo.honest, django_capture_on_commit_callbacks)

    scope = runs(attempt)["diff-scope"]
    assert scope.state == "failed"
    assert scope.verdict["outside"] == ["claimqueue.py"]


def test_an_unknown_commit_is_an_error_with_gits_message_after_every_try(
    runner_flow, django_capture_on_commit_callbacks, settings
):
    _, attempt = claimed(runner_flow)

    attempt = submit_through_the_gates(
        attempt, "0123456789abcdef000000000000000000000000", django_capture_on_commit_callbacks
    )

    runner = runs(attempt)["runner"]
    assert (runner.state, runner.tries) == ("error", settings.FACTORY_GATE_MAX_TRIES)
    assert runner.summary == (
        f"the gate crashed on all {settings.FACTORY_GATE_MAX_TRIES} tries: CommitNotFound: "
        "commit 0123456789abcdef000000000000000000000000 is not in the repository (fetched just now); was it pushed?"
    )
    assert (attempt.task.state, attempt.state) == ("ready", "failed")
    assert not Evidence.objects.filter(attempt=attempt, provenance="runner").exists()


def test_an_optional_runner_that_cannot_run_lets_the_other_gates_decide(
    runner_flow, django_capture_on_commit_callbacks, tmp_path
):
    project_services.project_update(
        project=runner_flow.project,
        actor=runner_flow.manager,
        repository_url=f"file://{tmp_path}/nonexistent",
        gate_policy={"runner": {"required": False}},
    )
    _, attempt = claimed(runner_flow)

    attempt = submit_through_the_gates(
        attempt, "0123456789abcdef000000000000000000000000", django_capture_on_commit_callbacks
    )

    runner = runs(attempt)["runner"]
    assert runner.state == "passed"
    assert runner.summary.startswith("not verified (the runner is optional): git clone: ")
    assert runner.verdict["verified"] is False
    assert attempt.task.state == "in_review"


def test_a_redelivered_runner_job_stores_one_result(
    runner_flow, repo, django_capture_on_commit_callbacks
):
    _, attempt = claimed(runner_flow)
    attempt = submit_through_the_gates(attempt, repo.honest, django_capture_on_commit_callbacks)
    stored = Evidence.objects.filter(attempt=attempt).count()

    again = evidence_services.gate_run_execute(run=runs(attempt)["runner"])

    assert (again.state, again.tries) == ("passed", 1)
    assert Evidence.objects.filter(attempt=attempt).count() == stored


def test_the_attempt_api_shows_the_runners_status(
    runner_flow, repo, api, django_capture_on_commit_callbacks
):
    _, attempt = claimed(runner_flow)
    attempt = submit_through_the_gates(
        attempt, repo.false_claim, django_capture_on_commit_callbacks
    )

    body = api(runner_flow.reviewer).get(f"/api/v1/attempts/{attempt.pk}/").json()

    runner = body["runner"]
    assert (runner["state"], runner["verified"], runner["commit"]) == (
        "failed",
        True,
        repo.false_claim,
    )
    assert runner["tests"]["failing"] == [FAILING_TEST]
    assert (runner["tests"]["tests"], runner["tests"]["failed"]) == (2, 1)
    assert runner["seconds"] > 0


def test_the_task_page_shows_the_runners_verification_and_where_the_agent_disagrees(
    runner_flow, repo, client, django_capture_on_commit_callbacks
):
    task, attempt = claimed(runner_flow)
    runner_flow.attach(attempt, PASSING_JUNIT, kind="junit", name="junit.xml")
    submit_through_the_gates(attempt, repo.false_claim, django_capture_on_commit_callbacks)
    client.force_login(runner_flow.reviewer)

    page = client.get(f"/tasks/{task.key}/?attempt=1").content.decode()

    assert f"verified at <code>{repo.false_claim[:12]}</code> in " in page
    assert "⚠ the test command exited with 1" in page
    assert "— agent: 2 passed; runner: 1 of 2 tests failed</li>" in page


@pytest.mark.django_db(transaction=True)
def test_the_embedded_default_answers_the_submit_at_once_and_the_verdict_follows(
    runner_flow, repo, api, settings, monkeypatch
):
    settings.FACTORY_EAGER_BACKGROUND_QUEUES = ["verify"]
    # The runner's thread starts once this test has read what the answer left: the test
    # database is SQLite in memory with a shared cache, where a table another connection is
    # reading is "locked" to a writer at once instead of waited for (a file database, as
    # `make run` uses, waits), so the thread racing the request's or this test's reads
    # failed the job now and then. From then on this thread only waits, reading nothing.
    answered = threading.Event()
    in_background = queue._in_background

    def after_the_answer(*args):
        answered.wait(30)
        in_background(*args)

    monkeypatch.setattr(queue, "_in_background", after_the_answer)
    project_services.project_update(
        project=runner_flow.project,
        actor=runner_flow.manager,
        verify={**VERIFY, "test": "sleep 2; python3 run_tests.py"},
    )
    task, attempt = claimed(runner_flow)

    response = api(runner_flow.agent).post(
        f"/api/v1/attempts/{attempt.pk}/submit/",
        {"summary": "done", "change": {"commit": repo.honest}},
        format="json",
    )

    assert response.status_code == 202
    assert runs(attempt)["runner"].state == "queued"
    answered.set()
    # The runner's thread, then the threads of the jobs it sent, until none is left.
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        running = [t for t in threading.enumerate() if t.name.startswith(BACKGROUND)]
        if not running:
            break
        running[0].join(timeout=max(deadline - time.monotonic(), 0.1))
    task.refresh_from_db()
    assert (task.state, runs(attempt)["runner"].state) == ("in_review", "passed")


def test_housekeeping_sweeps_workspaces_a_killed_runner_left_behind(db, settings):
    folder = settings.FACTORY_RUNNER_ROOT / "workspaces"
    limit = settings.FACTORY_RUNNER_TIME_LIMIT + settings.FACTORY_GATE_GRACE_SECONDS
    abandoned = folder / f"{int(time.time()) - limit - 10}-abandoned"
    live = folder / f"{int(time.time())}-live"
    for workspace in (abandoned, live):
        (workspace / "src").mkdir(parents=True)
        (workspace / "src" / "left.txt").write_text("x")

    counts = reconciler.housekeeping()

    assert counts["workspaces_swept"] == 1
    assert sorted(p.name for p in folder.iterdir()) == [live.name]


def test_a_runner_root_the_sandbox_cannot_reach_is_the_machines_fault_not_the_submissions(
    tmp_path, settings
):
    from runner.verify import RunnerUnavailable, verify

    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    settings.FACTORY_RUNNER_ROOT = private / "runner"
    project = type("P", (), {"pk": 1, "repository_url": "file:///x", "verify": VERIFY})()

    with pytest.raises(RunnerUnavailable) as refused:
        verify(project=project, commit="abc1234000000000000000000000000000000000")

    assert str(refused.value).startswith(
        f"the sandbox's user (65534) cannot pass through {private} on the way to"
    )


def test_an_unknown_commit_fails_even_an_optional_runner(
    runner_flow, django_capture_on_commit_callbacks
):
    project_services.project_update(
        project=runner_flow.project,
        actor=runner_flow.manager,
        gate_policy={"runner": {"required": False}},
    )
    _, attempt = claimed(runner_flow)

    attempt = submit_through_the_gates(
        attempt, "0123456789abcdef000000000000000000000000", django_capture_on_commit_callbacks
    )

    runner = runs(attempt)["runner"]
    assert (runner.state, runner.verdict["verified"]) == ("failed", False)
    assert runner.summary == (
        "commit 0123456789abcdef000000000000000000000000 is not in the repository (fetched just now); was it pushed?"
    )
    assert attempt.task.state == "ready"


def optional_runner_submits(flow, commit, capture):
    """The agent of an optional-runner project submits ``commit`` with its own passing JUnit."""
    project_services.project_update(project=flow.project, actor=flow.manager, gate_policy=OPTIONAL)
    _, attempt = claimed(flow)
    flow.attach(attempt, PASSING_JUNIT, kind="junit", name="junit.xml")
    return submit_through_the_gates(attempt, commit, capture)


def test_an_orphan_commit_fails_an_optional_runner_at_once(
    runner_flow, repo, django_capture_on_commit_callbacks
):
    orphan = orphan_commit(repo.path, repo.honest)

    attempt = optional_runner_submits(runner_flow, orphan, django_capture_on_commit_callbacks)

    runner = runs(attempt)["runner"]
    said = (
        f"commit {orphan[:12]} shares no history with the default branch 'main' "
        "(no merge base): base the change on the default branch"
    )
    assert (runner.state, runner.tries, runner.summary) == ("failed", 1, said)
    assert runner.verdict == {"verified": False, "error": said}
    assert (attempt.task.state, attempt.state) == ("ready", "failed")
    assert not Evidence.objects.filter(attempt=attempt, provenance="runner").exists()


def test_a_300_character_file_name_fails_an_optional_runner_at_once(
    runner_flow, repo, django_capture_on_commit_callbacks
):
    long = commit_files(repo.path, repo.honest, {"a" * 300: b"x\n"})

    attempt = optional_runner_submits(runner_flow, long, django_capture_on_commit_callbacks)

    runner = runs(attempt)["runner"]
    said = (
        f"the commit's tree has a file name of 300 bytes ({'a' * 60}…), "
        "longer than the 255 this file system allows"
    )
    assert (runner.state, runner.tries, runner.summary) == ("failed", 1, said)
    assert runner.verdict == {"verified": False, "error": said}
    assert (attempt.task.state, attempt.state) == ("ready", "failed")


def test_a_tree_over_the_checkout_limit_fails_a_required_runner_saying_so(
    runner_flow, repo, django_capture_on_commit_callbacks, settings
):
    settings.FACTORY_RUNNER_MAX_CHECKOUT_BYTES = 1_000_000
    big = commit_files(repo.path, repo.honest, {"big.txt": 2_000_000})
    _, attempt = claimed(runner_flow)

    attempt = submit_through_the_gates(attempt, big, django_capture_on_commit_callbacks)

    runner = runs(attempt)["runner"]
    assert (runner.state, runner.tries, runner.verdict["verified"]) == ("failed", 1, False)
    assert runner.summary == (
        "the commit's tree is 2.0 MB, over the limit of 1.0 MB (FACTORY_RUNNER_MAX_CHECKOUT_BYTES)"
    )
    assert (attempt.task.state, attempt.state) == ("ready", "failed")


def test_an_optional_runner_that_crashes_is_an_error_not_a_pass(
    runner_flow, repo, django_capture_on_commit_callbacks, monkeypatch, settings
):
    def crash(*, project, commit):
        raise KeyError("a bug, or a commit that found one")

    monkeypatch.setattr("runner.gates.runs", crash)

    attempt = optional_runner_submits(runner_flow, repo.honest, django_capture_on_commit_callbacks)

    runner = runs(attempt)["runner"]
    assert (runner.state, runner.tries) == ("error", settings.FACTORY_GATE_MAX_TRIES)
    assert runner.summary == (
        f"the gate crashed on all {settings.FACTORY_GATE_MAX_TRIES} tries: "
        "KeyError: 'a bug, or a commit that found one'"
    )
    assert (attempt.task.state, attempt.state) == ("ready", "failed")


def test_a_runner_job_delivered_again_while_its_run_is_running_starts_nothing(
    runner_flow, repo, django_capture_on_commit_callbacks, settings
):
    _, attempt = claimed(runner_flow)
    with django_capture_on_commit_callbacks(execute=False):
        attempts.attempt_submit(
            attempt=attempt, actor=attempt.agent, summary="done", change={"commit": repo.honest}
        )
    run = evidence_services.gate_run_start(run=runs(attempt)["runner"])  # the first delivery
    events = Event.objects.count()

    verify_job(run.pk)  # the second delivery, within the runner's time limit

    run.refresh_from_db()
    assert (run.state, run.tries, Event.objects.count()) == ("running", 1, events)
    assert not (settings.FACTORY_RUNNER_ROOT / "mirrors" / f"{runner_flow.project.pk}.git").exists()
