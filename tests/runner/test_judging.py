"""A tree judged by its runs (``runner.judging``), without git: the rules the runner's gate
and the lander share (docs/landing.md, "Flaky tests")."""

from runner import judging
from runner.verify import Result


def run(*failing: str, explained: bool = True, passing: tuple = ()) -> Result:
    cases = [f'<testcase classname="t.test_x.T" name="{n}"><failure/></testcase>' for n in failing]
    cases += [f'<testcase classname="t.test_x.T" name="{n}"/>' for n in passing]
    result = Result(commit="c" * 40, base="", mirror="built")
    result.junit = f"<testsuite>{''.join(cases)}</testsuite>".encode() if explained else None
    if failing or not explained:
        result.steps = [{"name": "test", "exit_code": 1, "stopped": None}]
        result.problems.append("the test command exited with code 1")
    return result


def judged(*results: Result, quarantine=frozenset()) -> judging.Verdict:
    given = iter(results)
    return judging.judge(lambda: next(given), set(quarantine), lambda run: None)


def name(test: str) -> str:
    return f"t/test_x.py::T::{test}"


def test_a_tree_passing_at_its_first_run_is_run_once():
    verdict = judged(run(passing=("a",)))
    assert (verdict.passed, verdict.runs, verdict.flaky) == (True, 1, [])


def test_a_failure_then_a_pass_makes_the_failing_tests_flaky():
    verdict = judged(run("a", "b"), run(passing=("a", "b")))
    assert (verdict.passed, verdict.runs, verdict.flaky) == (True, 2, [name("a"), name("b")])


def test_tests_failing_at_both_runs_fail_the_tree_and_the_others_are_flaky():
    verdict = judged(run("a", "b"), run("b", "c"))
    assert (verdict.passed, verdict.failing, verdict.flaky) == (
        False,
        [name("b")],
        [name("a"), name("c")],
    )


def test_two_runs_failing_by_different_tests_each_of_which_also_passed_pass_the_tree():
    verdict = judged(run("a", passing=("b",)), run("b", passing=("a",)))
    assert (verdict.passed, verdict.failing, verdict.flaky) == (True, [], [name("a"), name("b")])


def confirmed(verdict: judging.Verdict, result: Result) -> judging.Verdict:
    return judging.confirm(verdict, lambda: result, set(), lambda run: None)


def test_a_failing_tree_that_passes_its_confirming_run_passes_and_its_failures_are_flaky():
    verdict = confirmed(judged(run("a", "b"), run("a")), run(passing=("a", "b")))
    assert (verdict.passed, verdict.runs, verdict.failing, verdict.flaky) == (
        True,
        3,
        [],
        [name("a"), name("b")],
    )


def test_a_confirming_run_fails_the_tree_by_the_tests_that_failed_at_all_three():
    verdict = confirmed(judged(run("a", "b"), run("a", "b")), run("b", "c"))
    assert (verdict.passed, verdict.runs, verdict.failing, verdict.flaky) == (
        False,
        3,
        [name("b")],
        [name("a"), name("c")],
    )


def test_a_confirming_run_failing_by_other_tests_only_passes_the_tree():
    verdict = confirmed(judged(run("a"), run("a")), run("c", passing=("a",)))
    assert (verdict.passed, verdict.failing, verdict.flaky) == (True, [], [name("a"), name("c")])


def test_a_confirming_run_that_crashes_fails_the_tree():
    verdict = confirmed(judged(run("a"), run("a")), run(explained=False))
    assert (verdict.passed, verdict.runs) == (False, 3)


def test_a_failure_beyond_the_tests_at_both_runs_fails_the_tree_naming_no_flaky_test():
    verdict = judged(run(explained=False), run(explained=False))
    assert (verdict.passed, verdict.failing, verdict.flaky) == (False, [], [])


def test_a_crash_then_a_pass_passes_the_tree_and_blames_no_test():
    verdict = judged(run(explained=False), run(passing=("a",)))
    assert (verdict.passed, verdict.flaky) == (True, [])


def test_a_run_failing_only_by_quarantined_tests_passes():
    verdict = judged(run("a", passing=("b",)), quarantine={name("a")})
    assert (verdict.passed, verdict.runs) == (True, 1)


def test_a_report_naming_more_failures_than_tracked_fails_beyond_its_tests(monkeypatch):
    monkeypatch.setattr(judging, "TRACKED", 2)
    verdict = judged(run("a", "b", "c"), run("d", "e", "f"))
    assert (verdict.passed, verdict.flaky) == (False, [])


def test_an_unreadable_report_fails_the_run_saying_why():
    bad = run("a")
    bad.junit = b"<testsuite><testcase"
    verdict = judged(bad, run("a"))
    assert verdict.passed is False
    assert any("JUnit report cannot be read" in p for p in bad.problems)
