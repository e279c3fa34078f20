"""The runner's gate judges a submitted commit by its runs, as the lander judges a tree
(``runner.judging``; issue 34: flaky tests blame nobody, at submission too).

The sandbox tests use a test that fails at odd runs and passes at even ones
(``tests.coin``): a real flake in two sandboxed runs of one commit, in a certain order.
The rest script the runs.
"""

import itertools

import pytest

from demo.repository import CLAIMQUEUE, FAILING_TEST, RELEASE, RELEASE_TESTS, TESTS, VERIFY, build
from demo.runner_demo import CRITERIA, POLICY
from evidence.models import Evidence, GateRun
from evidence.selectors import runner_view
from landing.models import FlakyTest
from projects import services as project_services
from runner import gates
from runner.verify import Result
from tests.coin import COIN, COIN_TEST, COUNT, COUNTING
from tests.factories import submit_through_the_gates
from tests.runner.conftest import commit_files, git_in

RELEASED = {
    "claimqueue.py": (CLAIMQUEUE + RELEASE).encode(),
    "tests/test_claimqueue.py": (TESTS + RELEASE_TESTS).encode(),
}


@pytest.fixture
def repo(tmp_path, runner_root):
    return build(tmp_path / "repo")


@pytest.fixture
def counting(flow, repo):
    """The project counts its runs in the cache; main holds the counter."""
    main = commit_files(repo.path, repo.main, {"count.py": COUNT.encode()}, branch="main")
    project_services.project_update(
        project=flow.project,
        actor=flow.manager,
        repository_url=repo.url,
        verify={**VERIFY, **COUNTING},
        gate_policy=POLICY,
    )
    flow.project.refresh_from_db()
    flow.spec_ = flow.spec(criteria=CRITERIA)
    return main


def submitted(flow, commit, capture):
    _, attempt = flow.claimed(spec=flow.spec_, allowed_paths=["**"])
    return submit_through_the_gates(attempt, commit, capture)


def runner_of(attempt) -> GateRun:
    return GateRun.objects.get(attempt=attempt, gate="runner")


def test_a_flaky_test_of_the_base_fails_no_submission_and_is_recorded_for_the_project(
    flow, repo, counting, django_capture_on_commit_callbacks
):
    base = commit_files(
        repo.path, counting, {"tests/test_coin.py": COIN_TEST.encode()}, branch="main"
    )
    change = commit_files(repo.path, base, RELEASED, branch="release")

    attempt = submitted(flow, change, django_capture_on_commit_callbacks)

    assert (attempt.task.state, attempt.state) == ("in_review", "passed")
    runner = runner_of(attempt)
    assert (runner.state, runner.verdict["runs"], runner.verdict["flaky"]) == ("passed", 2, [COIN])
    assert runner.summary.startswith(f"verified at {change[:12]} in ")
    assert runner.summary.endswith(f"; run 2 times: flaky, not the change's: {COIN}")
    # The reports attached are the passing run's: tests-pass decides on them.
    assert GateRun.objects.get(attempt=attempt, gate="tests-pass").state == "passed"
    row = FlakyTest.objects.get(project=flow.project)
    tree = git_in(repo.path, "rev-parse", f"{change}^{{tree}}").strip()
    assert (row.test, row.flakes, row.trees, row.quarantined) == (COIN, 1, [tree], False)
    # The failing run's log is kept to read; the runner's panel shows the last run's.
    logs = Evidence.objects.filter(attempt=attempt, provenance="runner", kind="log")
    assert sorted(logs.values_list("name", flat=True)) == ["runner-run-1.log", "runner.log"]
    earlier = logs.get(name="runner-run-1.log")
    assert earlier.summary["earlier_run"] == 1
    with earlier.file.open() as handle:
        assert b"test_coin (tests.test_coin.CoinTest.test_coin) ... FAIL" in handle.read()
    shown = runner_view(attempt, list(attempt.gate_runs.all()), list(attempt.evidence.all()))
    assert shown["log"].name == "runner.log"


def test_a_submission_whose_own_test_flakes_fails_naming_it_and_records_nothing(
    flow, repo, counting, django_capture_on_commit_callbacks
):
    change = commit_files(
        repo.path, counting, {**RELEASED, "tests/test_coin.py": COIN_TEST.encode()}, branch="sly"
    )

    attempt = submitted(flow, change, django_capture_on_commit_callbacks)

    assert (attempt.task.state, attempt.state) == ("ready", "failed")
    runner = runner_of(attempt)
    assert (runner.state, runner.verdict["runs"], runner.verdict["flaky"]) == ("failed", 2, [COIN])
    assert runner.summary == (
        f"a test this change adds or edits is flaky at {change[:12]} (it failed and then "
        f"passed at one commit): {COIN}; make it pass every time and submit again"
    )
    # Not the project's test yet: counting it would let an agent flake its own test into
    # the project's automatic quarantine.
    assert not FlakyTest.objects.exists()


def test_a_test_that_fails_at_both_runs_fails_the_submission_saying_so(
    flow, repo, counting, django_capture_on_commit_callbacks
):
    broken = git_in(repo.path, "show", f"{repo.false_claim}:claimqueue.py")
    change = commit_files(repo.path, counting, {"claimqueue.py": broken.encode()}, branch="broken")

    attempt = submitted(flow, change, django_capture_on_commit_callbacks)

    assert (attempt.task.state, attempt.state) == ("ready", "failed")
    runner = runner_of(attempt)
    assert (runner.verdict["runs"], runner.verdict["flaky"]) == (2, [])
    assert runner.summary.endswith(
        f"; failing: {FAILING_TEST} (the commit failed at each of its 2 runs)"
    )
    assert not FlakyTest.objects.exists()


def test_a_failing_run_is_not_run_again_when_another_would_pass_the_time_limit(
    flow, repo, counting, django_capture_on_commit_callbacks, settings
):
    settings.FACTORY_RUNNER_TIME_LIMIT = gates.MARGIN_SECONDS  # no room for a second run
    base = commit_files(
        repo.path, counting, {"tests/test_coin.py": COIN_TEST.encode()}, branch="main"
    )
    change = commit_files(repo.path, base, RELEASED, branch="release")

    attempt = submitted(flow, change, django_capture_on_commit_callbacks)

    runner = runner_of(attempt)
    assert (runner.state, runner.verdict["runs"]) == ("failed", 1)
    assert runner.summary.endswith(
        f"; failing: {COIN}; not run again: another run would not end within the runner's "
        "time limit"
    )


# --- The runs scripted -----------------------------------------------------------------


def run(*failing: str, passing: tuple = ("b",)) -> Result:
    cases = [f'<testcase classname="t.test_x.T" name="{n}"><failure/></testcase>' for n in failing]
    cases += [f'<testcase classname="t.test_x.T" name="{n}"/>' for n in passing]
    result = Result(commit="c" * 40, base="b" * 40, mirror="fetched")
    result.junit = f"<testsuite>{''.join(cases)}</testsuite>".encode()
    if failing:
        result.steps = [
            {
                "name": "test",
                "command": "make test",
                "exit_code": 1,
                "stopped": None,
                "outcome": "exited with 1",
            }
        ]
        result.problems.append("the test command exited with code 1")
    return result


@pytest.fixture
def scripted(monkeypatch, flow):
    """``judge`` over the given runs, the change touching no test file; what it judged,
    and how many runs it took."""

    def judge(*results: Result) -> tuple[gates.Judged, int]:
        given = iter(results)
        taken = itertools.count(1)

        def runs(*, project, commit):
            for result in given:
                next(taken)
                yield result

        monkeypatch.setattr(gates, "runs", runs)
        monkeypatch.setattr(gates, "changed", lambda *, project, result, among: set())
        monkeypatch.setattr(gates, "tree_of", lambda *, project, result: "t" * 40)
        judged = gates.judge(flow.project, "c" * 40, limit=3600)
        return judged, next(taken) - 1

    return judge


def name(test: str) -> str:
    return f"t/test_x.py::T::{test}"


def test_a_commit_passing_at_its_first_run_is_run_once(scripted):
    judged, taken = scripted(run(), run("a"))
    assert (judged.passed, judged.runs, taken, judged.flaky) == (True, 1, 1, [])


def test_two_runs_failing_by_different_tests_are_settled_by_a_third(scripted):
    judged, taken = scripted(run("a"), run("c"), run())
    assert (judged.passed, judged.runs, taken) == (True, 3, 3)
    assert judged.flaky == [name("a"), name("c")]
    assert [row.test for row in FlakyTest.objects.order_by("test")] == [name("a"), name("c")]


def test_three_runs_failing_by_different_tests_fail_without_a_run_that_passed(scripted):
    judged, taken = scripted(run("a"), run("c"), run("d"), run())
    assert (judged.passed, judged.runs, taken, judged.failing) == (False, 3, 3, [])
    assert not FlakyTest.objects.exists()  # no run passed: nothing is known flaky


def test_three_different_failures_are_named_as_the_last_runs_not_as_every_runs(scripted, flow):
    _, attempt = flow.claimed()
    judged, _ = scripted(run("a"), run("c"), run("d"))

    verdict = gates.RunnerGate().verdict(attempt, judged)

    assert verdict.passed is False
    assert verdict.summary.endswith(
        f"; failing at the last run: {name('d')} (the commit failed at each of its 3 runs)"
    )


def test_a_test_failing_at_both_runs_ends_the_runs_at_two(scripted):
    judged, taken = scripted(run("a", "c"), run("a"), run())
    assert (judged.passed, judged.runs, taken, judged.failing, judged.flaky) == (
        False,
        2,
        2,
        [name("a")],
        [name("c")],
    )


def test_a_report_that_cannot_be_read_fails_the_commit_and_is_left_for_the_verdict_to_say(
    scripted,
):
    unreadable = run()
    unreadable.junit = b"<testsuite><testcase"

    judged, taken = scripted(unreadable, unreadable)

    assert (judged.passed, judged.runs, taken) == (False, 2, 2)
    assert judged.result.problems == []  # the gate's verdict names it, once
