"""The built-in gates, called directly on real artifacts: JUnit and Cobertura XML from a real
pytest run under coverage.py, and diffs made by ``git diff`` of real changes."""

import shutil
import subprocess
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.core.files.base import ContentFile

from decisions import services as decision_services
from evidence import gates
from evidence.gates import Verdict
from projects.policy import clean_policy, registry
from runner.gates import RunnerGate

SCREENSHOT = Path(__file__).resolve().parents[2] / "demo" / "screenshot.png"
ALLOWED = ["tasks/**", "tests/**"]
BUILT_IN = [
    "authoritative-tests",
    "coverage",
    "diff-scope",
    "required-evidence",
    "runner",
    "spec-current",
    "tests-pass",
]

# coverage.py measures 7 of the 10 lines of real_reports.CLAIMQUEUE: release() never runs.
LINE_RATE = 0.7
FAILING_TEST = "tests/test_claim.py::test_two_agents_never_get_the_same_item"
REVIEW_TESTS = "tests/test_review.py::*"


def git(*args, cwd):
    identity = ["-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    return subprocess.run(
        ["git", *identity, *args], cwd=cwd, capture_output=True, timeout=30, check=True
    ).stdout


def git_diffs(work: Path) -> dict:
    """``git diff`` of two real changes: one inside tasks/, one that also edits the settings."""
    git("init", "-q", cwd=work)
    for path in ("tasks/services.py", "tasks/models.py", "factory_site/settings.py"):
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(f'"""{path}"""\n\nVALUE = 1\n')
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "base", cwd=work)
    (work / "tasks/services.py").write_text('"""tasks/services.py"""\n\nVALUE = 2\n')
    (work / "tasks/models.py").write_text('"""tasks/models.py"""\n\nVALUE = 1\nOTHER = 3\n')
    inside = git("diff", cwd=work)
    (work / "factory_site/settings.py").write_text('"""settings"""\n\nVALUE = 1\nDEBUG = True\n')
    return {"inside": inside, "outside": git("diff", cwd=work)}


@pytest.fixture(scope="module")
def diffs(tmp_path_factory):
    if shutil.which("git") is None:
        pytest.skip("needs git")
    return git_diffs(tmp_path_factory.mktemp("repo"))


def junit(flow, attempt, content, actor=None, criteria=()):
    return flow.attach(
        attempt, content, kind="junit", actor=actor, name="junit.xml", criteria=criteria
    )


def check(name, attempt, params=None, policy=None):
    return registry()[name].check(attempt, params or {}, policy or {name: params or {}})


# --- tests-pass ---------------------------------------------------------------------------------


def test_tests_pass_passes_on_a_real_all_passing_report(flow, reports):
    _, attempt = flow.claimed(spec=flow.spec())
    report = junit(flow, attempt, reports["passing"], criteria=["AC-1"])

    verdict = check("tests-pass", attempt)

    assert (verdict.passed, verdict.summary) == (True, "3 tests passed")
    assert verdict.details == {
        "decided_on": [report.pk],
        "set_aside": [],
        "tests": 3,
        "failed": [],
        "unmatched_criteria": [],
        "skipped": 0,
    }
    assert "3 tests in 1 report(s)." in verdict.report


def test_tests_pass_fails_on_a_real_report_with_one_failing_test(flow, reports):
    _, attempt = flow.claimed()
    junit(flow, attempt, reports["failing"])

    verdict = check("tests-pass", attempt)

    assert verdict.passed is False
    [failed] = verdict.details["failed"]
    assert (failed["outcome"], failed["message"]) == ("failed", reports["failure_message"])
    assert "test_two_agents_never_get_the_same_item" in failed["test"]
    assert verdict.summary == f"1 of 3 tests failed: {failed['test']}"
    assert verdict.details["tests"] == 3


def test_tests_pass_names_the_failing_test_by_its_real_path(flow, reports):
    _, attempt = flow.claimed()
    junit(flow, attempt, reports["failing"])

    verdict = check("tests-pass", attempt)

    assert [f["test"] for f in verdict.details["failed"]] == [FAILING_TEST]
    assert verdict.summary == f"1 of 3 tests failed: {FAILING_TEST}"


def test_tests_pass_fails_when_the_reports_hold_no_test(flow, reports):
    _, attempt = flow.claimed()
    report = junit(flow, attempt, reports["empty"])

    verdict = check("tests-pass", attempt)

    assert (verdict.passed, verdict.summary) == (
        False,
        f"a JUnit report ran no test: junit.xml (evidence {report.pk})",
    )
    assert verdict.details["tests"] == 0


def test_tests_pass_fails_when_one_of_the_reports_ran_no_test(flow, reports):
    _, attempt = flow.claimed()
    junit(flow, attempt, reports["passing"])
    junit(flow, attempt, reports["empty"])

    verdict = check("tests-pass", attempt)

    assert (verdict.passed, verdict.details["tests"]) == (False, 3)


def test_tests_pass_fails_without_junit_evidence(flow, reports):
    _, attempt = flow.claimed(spec=flow.spec())
    flow.attach(attempt, reports["coverage"], kind="coverage", name="coverage.xml")

    verdict = check("tests-pass", attempt)

    assert verdict == Verdict(
        False,
        "no JUnit evidence to check",
        {"decided_on": [], "set_aside": []},
        "No JUnit evidence was attached.\nDecided on evidence none.",
    )


def test_tests_pass_fails_when_a_criterion_selects_no_passing_test(flow, reports):
    criteria = [
        {"key": "AC-1", "text": "Claims.", "proof": {"check": "tests", "select": "tests/*"}},
        {"key": "AC-2", "text": "Reviews.", "proof": {"check": "tests", "select": REVIEW_TESTS}},
    ]
    _, attempt = flow.claimed(spec=flow.spec(criteria=criteria))
    junit(flow, attempt, reports["passing"])

    verdict = check("tests-pass", attempt)

    assert verdict.passed is False
    assert verdict.details["unmatched_criteria"] == [{"criterion": "AC-2", "select": REVIEW_TESTS}]
    assert verdict.summary == f"no passing test matches AC-2 ({REVIEW_TESTS})"


def test_a_failing_test_does_not_satisfy_the_criterion_that_selects_it(flow, reports):
    select = "tests/test_claim.py::test_two_agents*"
    criteria = [{"key": "AC-1", "text": "Claims.", "proof": {"check": "tests", "select": select}}]
    _, attempt = flow.claimed(spec=flow.spec(criteria=criteria))
    junit(flow, attempt, reports["failing"])

    verdict = check("tests-pass", attempt)

    assert verdict.passed is False
    assert verdict.details["unmatched_criteria"] == [{"criterion": "AC-1", "select": select}]
    assert len(verdict.details["failed"]) == 1


def test_with_authoritative_tests_the_agents_junit_is_ignored(flow, reports):
    _, attempt = flow.claimed()
    agents = junit(flow, attempt, reports["passing"])
    policy = {"tests-pass": {}, "authoritative-tests": {}}

    verdict = registry()["tests-pass"].check(attempt, {}, policy)

    assert (verdict.passed, verdict.summary) == (
        False,
        "no authoritative JUnit evidence to check",
    )
    assert verdict.details == {"decided_on": [], "set_aside": [agents.pk]}


def test_with_authoritative_tests_the_verifiers_junit_counts(flow, reports):
    _, attempt = flow.claimed()
    agents = junit(flow, attempt, reports["failing"])  # the agent's own, failing: ignored
    trusted = junit(flow, attempt, reports["passing"], actor=flow.verifier)
    policy = {"tests-pass": {}, "authoritative-tests": {}}

    verdict = registry()["tests-pass"].check(attempt, {}, policy)

    assert (verdict.passed, verdict.summary) == (True, "3 tests passed")
    assert (verdict.details["decided_on"], verdict.details["set_aside"]) == (
        [trusted.pk],
        [agents.pk],
    )


def test_tests_pass_names_at_most_failed_listed_tests_and_counts_them_all(flow, monkeypatch):
    monkeypatch.setattr(gates, "FAILED_LISTED", 2)
    _, attempt = flow.claimed()
    failing = "".join(
        f'<testcase classname="tests.test_f" name="test_{n}"><failure message="no"/></testcase>'
        for n in range(3)
    )
    junit(flow, attempt, f"<testsuite>{failing}</testsuite>".encode())

    verdict = check("tests-pass", attempt)

    assert [f["test"] for f in verdict.details["failed"]] == [
        "tests/test_f.py::test_0",
        "tests/test_f.py::test_1",
    ]
    assert (verdict.details["failed_count"], verdict.details["tests"]) == (3, 3)
    assert (
        verdict.summary == "3 of 3 tests failed: tests/test_f.py::test_0, tests/test_f.py::test_1"
    )
    assert "… and 1 more" in verdict.report


def test_a_coverage_report_whose_rate_is_not_a_fraction_is_not_cobertura(flow, monkeypatch):
    _, attempt = flow.claimed()
    report = flow.attach(attempt, b'<coverage line-rate="0.9"/>', kind="coverage", name="c.xml")
    infinite = ContentFile(b'<coverage line-rate="inf"/>')
    monkeypatch.setattr(gates.Gate, "open", staticmethod(lambda evidence: infinite))

    verdict = check("coverage", attempt)

    assert (verdict.passed, verdict.summary) == (
        False,
        f"coverage report {report.pk} is not a Cobertura report",
    )


# --- coverage ---------------------------------------------------------------------------------


def test_the_real_report_has_the_measured_line_rate(reports):
    assert reports["line_rate"] == LINE_RATE


@pytest.mark.parametrize(
    ("threshold", "passed", "summary"),
    [
        (0.69, True, "line rate 70.0% ≥ 69.0%"),
        (0.7, True, "line rate 70.0% ≥ 70.0%"),
        (0.71, False, "line rate 70.0% is below 71.0%"),
        (0.9, False, "line rate 70.0% is below 90.0%"),
    ],
)
def test_coverage_compares_the_line_rate_with_the_threshold(
    flow, reports, threshold, passed, summary
):
    _, attempt = flow.claimed()
    report = flow.attach(attempt, reports["coverage"], kind="coverage", name="coverage.xml")

    verdict = check("coverage", attempt, {"threshold": threshold})

    assert (verdict.passed, verdict.summary) == (passed, summary)
    assert verdict.details == {
        "report": report.pk,
        "line_rate": 0.7,
        "threshold": threshold,
        "decided_on": [report.pk],
        "set_aside": [],
    }


def test_coverage_uses_the_default_threshold_of_eighty_percent(flow, reports):
    _, attempt = flow.claimed()
    flow.attach(attempt, reports["coverage"], kind="coverage", name="coverage.xml")

    verdict = check("coverage", attempt, {})

    assert (verdict.passed, verdict.summary) == (False, "line rate 70.0% is below 80.0%")


def test_coverage_fails_without_coverage_evidence(flow, reports):
    _, attempt = flow.claimed()
    junit(flow, attempt, reports["passing"])

    verdict = check("coverage", attempt, {"threshold": 0.5})

    assert verdict == Verdict(
        False,
        "no coverage evidence to check",
        {"threshold": 0.5, "decided_on": [], "set_aside": []},
    )


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"threshold": 1.5}, "coverage: threshold must lie between 0 and 1"),
        ({"threshold": -0.1}, "coverage: threshold must lie between 0 and 1"),
        ({"threshold": "0.9"}, "coverage: threshold must be a float"),
        ({"threshold": True}, "coverage: threshold must be a float"),
        ({"threshold": 0.9, "branches": 0.5}, "coverage: unknown parameters branches"),
    ],
)
def test_coverage_refuses_bad_parameters(params, message):
    with pytest.raises(ValidationError) as refused:
        gates.CoverageGate().clean_params(params)

    assert refused.value.messages == [message]


@pytest.mark.parametrize(
    ("params", "cleaned"),
    [({"threshold": 1}, 1.0), ({"threshold": 0}, 0.0), ({"threshold": 0.85}, 0.85), (None, 0.8)],
)
def test_coverage_cleans_its_threshold_to_a_float(params, cleaned):
    result = gates.CoverageGate().clean_params(params)

    assert result == {"threshold": cleaned}
    assert type(result["threshold"]) is float


# --- diff-scope ---------------------------------------------------------------------------------


def test_diff_scope_passes_a_real_diff_inside_the_allowed_paths(flow, diffs):
    _, attempt = flow.claimed(allowed_paths=ALLOWED)
    diff = flow.attach(attempt, diffs["inside"], kind="diff", name="change.diff")

    verdict = check("diff-scope", attempt)

    assert (verdict.passed, verdict.summary) == (True, "all 2 files inside the allowed paths")
    assert verdict.details == {
        "files": ["tasks/models.py", "tasks/services.py"],
        "outside": [],
        "unsafe": [],
        "allowed_paths": ALLOWED,
        "decided_on": [diff.pk],
        "set_aside": [],
    }


def test_diff_scope_fails_a_real_diff_that_edits_the_settings(flow, diffs):
    _, attempt = flow.claimed(allowed_paths=ALLOWED)
    flow.attach(attempt, diffs["outside"], kind="diff", name="change.diff")

    verdict = check("diff-scope", attempt)

    assert verdict.passed is False
    assert verdict.details["outside"] == ["factory_site/settings.py"]
    assert verdict.details["files"] == [
        "factory_site/settings.py",
        "tasks/models.py",
        "tasks/services.py",
    ]
    assert verdict.summary == "1 file(s) outside the allowed paths: factory_site/settings.py"
    assert "- factory_site/settings.py" in verdict.report


def test_diff_scope_checks_every_diff_attached(flow, diffs):
    _, attempt = flow.claimed(allowed_paths=ALLOWED)
    flow.attach(attempt, diffs["inside"], kind="diff", name="first.diff")
    flow.attach(attempt, diffs["outside"], kind="diff", name="second.diff")

    verdict = check("diff-scope", attempt)

    assert (verdict.passed, verdict.details["outside"]) == (False, ["factory_site/settings.py"])


def test_diff_scope_names_at_most_files_listed_paths_and_counts_them_all(flow, diffs, monkeypatch):
    monkeypatch.setattr(gates, "FILES_LISTED", 1)
    _, attempt = flow.claimed(allowed_paths=["docs/**"])
    diff = flow.attach(attempt, diffs["outside"], kind="diff", name="change.diff")

    verdict = check("diff-scope", attempt)

    assert verdict.details == {
        "files": ["factory_site/settings.py"],
        "files_count": 3,
        "outside": ["factory_site/settings.py"],
        "outside_count": 3,
        "unsafe": [],
        "allowed_paths": ["docs/**"],
        "decided_on": [diff.pk],
        "set_aside": [],
    }
    assert verdict.summary.startswith("3 file(s) outside the allowed paths: ")
    assert "… and 2 more" in verdict.report


def test_diff_scope_passes_a_task_without_a_path_boundary(flow, diffs):
    _, attempt = flow.claimed()
    flow.attach(attempt, diffs["outside"], kind="diff", name="change.diff")

    verdict = check("diff-scope", attempt)

    assert (verdict.passed, verdict.summary) == (
        True,
        "3 files changed; the task sets no path boundary",
    )
    assert verdict.details["allowed_paths"] == []


def test_diff_scope_fails_without_diff_evidence(flow, reports):
    _, attempt = flow.claimed(allowed_paths=ALLOWED)
    junit(flow, attempt, reports["passing"])

    verdict = check("diff-scope", attempt)

    assert verdict == Verdict(
        False,
        "no diff evidence to check",
        {"allowed_paths": ALLOWED, "decided_on": [], "set_aside": []},
    )


# --- required-evidence --------------------------------------------------------------------------


def test_required_evidence_names_the_missing_screenshot(flow, reports):
    _, attempt = flow.claimed(spec=flow.spec())
    report = junit(flow, attempt, reports["passing"], criteria=["AC-1"])

    verdict = check("required-evidence", attempt)

    assert (verdict.passed, verdict.summary) == (False, "AC-2 needs screenshot evidence")
    assert verdict.details == {
        "missing": ["AC-2 needs screenshot evidence"],
        "criteria": [
            {"criterion": "AC-1", "proof": "junit", "evidence": [report.pk]},
            {"criterion": "AC-2", "proof": "screenshot", "evidence": []},
            {"criterion": "AC-3", "proof": "review", "evidence": []},
        ],
    }
    assert "- AC-2 (screenshot): MISSING" in verdict.report


def test_required_evidence_passes_with_a_junit_report_and_a_real_screenshot(flow, reports):
    _, attempt = flow.claimed(spec=flow.spec())
    report = junit(flow, attempt, reports["passing"])
    png = flow.attach(
        attempt, SCREENSHOT.read_bytes(), kind="screenshot", name="queue.png", criteria=["AC-2"]
    )

    verdict = check("required-evidence", attempt)

    assert (verdict.passed, verdict.summary) == (True, "all 3 criteria have their proof")
    assert [row["evidence"] for row in verdict.details["criteria"]] == [[report.pk], [png.pk], []]
    assert "- AC-3 (review): judged in review" in verdict.report


def test_required_evidence_with_nothing_attached_names_every_missing_proof(flow):
    _, attempt = flow.claimed(spec=flow.spec())

    verdict = check("required-evidence", attempt)

    assert verdict.passed is False
    assert verdict.summary == "AC-1 needs junit evidence; AC-2 needs screenshot evidence"


def test_required_evidence_passes_a_task_without_a_spec(flow):
    _, attempt = flow.claimed()

    verdict = check("required-evidence", attempt)

    assert verdict == Verdict(True, "the task has no spec; no criteria to prove", {"criteria": []})


# --- spec-current -------------------------------------------------------------------------------

NEW_CRITERIA = [
    {
        "key": "AC-1",
        "text": "Claims are exclusive.",
        "proof": {"check": "tests", "select": "tests/test_claim.py::*"},
    },
    {
        "key": "AC-2",
        "text": "The queue is shown, oldest first.",
        "proof": {"check": "evidence", "kind": "screenshot"},
    },
    {"key": "AC-4", "text": "Claims expire.", "proof": {"check": "tests", "select": "*expire*"}},
]
BODY_DIFF = "--- FM-S1 v1\n+++ FM-S1 v2\n@@ -1 +1,3 @@\n # Spec\n+\n+Claims expire.\n"


def test_spec_current_passes_while_the_pinned_version_is_current(flow):
    _, attempt = flow.claimed(spec=flow.spec())

    verdict = check("spec-current", attempt)

    assert verdict == Verdict(True, "FM-S1 v1 is still current", {"pinned": 1})


def test_spec_current_fails_once_a_new_version_is_accepted(flow):
    spec = flow.spec()
    _, attempt = flow.claimed(spec=spec)
    version = decision_services.spec_version_create(
        spec=spec, actor=flow.manager, body="# Spec\n\nClaims expire.\n", criteria=NEW_CRITERIA
    )
    decision_services.spec_version_accept(version=version, actor=flow.manager)

    verdict = check("spec-current", attempt)

    assert (verdict.passed, verdict.summary) == (False, "claimed under v1; the spec is now at v2")
    assert verdict.details == {
        "pinned": 1,
        "current": 2,
        "added": ["AC-4"],
        "removed": ["AC-3"],
        "changed": ["AC-2"],
        "source_decision": None,
        "body_diff": BODY_DIFF,
    }
    assert BODY_DIFF in verdict.report


def test_spec_current_names_the_decision_that_amended_the_spec(flow):
    spec = flow.spec()
    _, attempt = flow.claimed(spec=spec)
    decision = decision_services.decision_propose(
        project=flow.project,
        actor=flow.reviewer,
        title="Claims expire",
        context="Agents die.",
        decision="Leases expire.",
        amendments=[{"spec": spec, "body": "# Spec\n\nClaims expire.\n", "criteria": NEW_CRITERIA}],
    )
    decision_services.decision_accept(decision=decision, actor=flow.manager)

    verdict = check("spec-current", attempt)

    assert verdict.summary == "claimed under v1; the spec is now at v2 (amended by FM-D1)"
    assert (verdict.details["source_decision"], verdict.details["body_diff"]) == (
        "FM-D1",
        BODY_DIFF,
    )


def test_spec_current_passes_a_task_without_a_spec(flow):
    _, attempt = flow.claimed()

    assert check("spec-current", attempt) == Verdict(True, "the task has no spec", {})


# --- authoritative-tests ------------------------------------------------------------------------


def test_authoritative_tests_fails_with_only_the_agents_junit(flow, reports):
    _, attempt = flow.claimed()
    mine = junit(flow, attempt, reports["passing"])

    verdict = check("authoritative-tests", attempt)

    assert verdict == Verdict(
        False,
        "no JUnit evidence from a verifier; the agent's own reports do not count",
        {"authoritative": [], "agent": [mine.pk]},
    )


def test_authoritative_tests_passes_with_the_verifiers_junit(flow, reports):
    _, attempt = flow.claimed()
    mine = junit(flow, attempt, reports["passing"])
    trusted = junit(flow, attempt, reports["passing"], actor=flow.verifier)

    verdict = check("authoritative-tests", attempt)

    assert verdict == Verdict(
        True,
        "1 JUnit report(s) from a verifier",
        {"authoritative": [trusted.pk], "agent": [mine.pk]},
    )


# --- Registry and policies ----------------------------------------------------------------------


def test_the_registry_holds_the_built_in_gates_by_name():
    known = registry()

    assert sorted(known) == BUILT_IN
    assert {name: type(gate) for name, gate in known.items()} == {
        "authoritative-tests": gates.AuthoritativeTests,
        "coverage": gates.CoverageGate,
        "diff-scope": gates.DiffScope,
        "required-evidence": gates.RequiredEvidence,
        "runner": RunnerGate,
        "spec-current": gates.SpecCurrent,
        "tests-pass": gates.TestsPass,
    }
    assert all(gate.name == name for name, gate in known.items())


def test_clean_policy_refuses_an_unknown_gate_by_name():
    with pytest.raises(ValidationError) as refused:
        clean_policy({"tests-pass": {}, "lint": {}})

    assert refused.value.message_dict == {
        "gate_policy": [f"unknown gate 'lint' (known: {', '.join(BUILT_IN)})"]
    }


def test_clean_policy_reports_every_problem_at_once():
    with pytest.raises(ValidationError) as refused:
        clean_policy({"lint": {}, "coverage": {"threshold": 1.5}})

    assert refused.value.message_dict["gate_policy"] == [
        f"unknown gate 'lint' (known: {', '.join(BUILT_IN)})",
        "coverage: threshold must lie between 0 and 1",
    ]


def test_clean_policy_cleans_the_parameters():
    policy = {"coverage": {"threshold": 1}, "tests-pass": None, "diff-scope": {}}

    cleaned = clean_policy(policy)

    assert cleaned == {"coverage": {"threshold": 1.0}, "tests-pass": {}, "diff-scope": {}}
    assert type(cleaned["coverage"]["threshold"]) is float


@pytest.mark.parametrize("policy", [["tests-pass"], "tests-pass", None])
def test_clean_policy_refuses_a_policy_that_is_not_an_object(policy):
    with pytest.raises(ValidationError) as refused:
        clean_policy(policy)

    assert list(refused.value.message_dict) == ["gate_policy"]


def test_a_gate_without_parameters_refuses_any():
    with pytest.raises(ValidationError) as refused:
        clean_policy({"diff-scope": {"strict": True}})

    assert refused.value.message_dict == {"gate_policy": ["diff-scope: unknown parameters strict"]}
