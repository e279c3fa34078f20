"""The rule of trust: an agent's own report never outvotes an authoritative one, a gate's
report never proves a criterion, and a diff's paths cannot climb out of the boundary.

Each test is an attack an agent that wants to pass without doing the work would try.
"""

import pytest

from evidence import services as evidence_services
from evidence.gates import Gate, Verdict
from evidence.models import GateRun, Kind, decisive
from evidence.selectors import criteria_status
from projects.paths import UnsafePath, repo_path
from projects.policy import registry


def cobertura(rate: float) -> bytes:
    return (
        f'<?xml version="1.0" ?><coverage version="7.6" line-rate="{rate}" branch-rate="0" '
        'lines-covered="4" lines-valid="10" timestamp="1" complexity="0"><sources/>'
        "<packages/></coverage>"
    ).encode()


def junit_report(failures: int = 0) -> bytes:
    cases = ['<testcase classname="tests.test_claim" name="test_claim_is_exclusive"/>']
    cases += [
        f'<testcase classname="tests.test_claim" name="test_broken_{n}">'
        '<failure message="assert False">boom</failure></testcase>'
        for n in range(failures)
    ]
    return (
        f'<testsuites><testsuite name="pytest" tests="{len(cases)}" failures="{failures}">'
        f"{''.join(cases)}</testsuite></testsuites>"
    ).encode()


def unified_diff(*paths: str) -> bytes:
    return "".join(
        f"diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n@@ -1 +1 @@\n-old\n+new\n" for p in paths
    ).encode()


def check(name, attempt, params=None, policy=None):
    return registry()[name].check(attempt, params or {}, policy or {name: params or {}})


# --- authoritative evidence decides ----------------------------------------------------------


def test_an_agents_later_coverage_report_does_not_override_the_verifiers(flow):
    _, attempt = flow.claimed()
    verifiers = flow.attach(attempt, cobertura(0.40), kind="coverage", actor=flow.verifier)
    agents = flow.attach(attempt, cobertura(0.99), kind="coverage")

    verdict = check("coverage", attempt, {"threshold": 0.8})

    assert (verdict.passed, verdict.summary) == (False, "line rate 40.0% is below 80.0%")
    assert (verdict.details["report"], verdict.details["set_aside"]) == (
        verifiers.pk,
        [agents.pk],
    )
    assert f"Set aside (self-reported, outweighed by authoritative evidence): {agents.pk}" in (
        verdict.report
    )


def test_an_agents_passing_junit_does_not_outvote_the_verifiers_failing_one(flow):
    _, attempt = flow.claimed()
    verifiers = flow.attach(attempt, junit_report(failures=1), kind="junit", actor=flow.verifier)
    flow.attach(attempt, junit_report(), kind="junit")

    verdict = check("tests-pass", attempt)

    assert (verdict.passed, verdict.summary) == (
        False,
        "1 of 2 tests failed: tests/test_claim.py::test_broken_0",
    )
    assert verdict.details["decided_on"] == [verifiers.pk]


def test_an_agents_diff_does_not_hide_what_the_verifiers_diff_shows(flow):
    _, attempt = flow.claimed(allowed_paths=["templates/**"])
    flow.attach(attempt, unified_diff("factory_site/settings.py"), kind="diff", actor=flow.verifier)
    flow.attach(attempt, unified_diff("templates/base.html"), kind="diff")

    verdict = check("diff-scope", attempt)

    assert (verdict.passed, verdict.details["outside"]) == (False, ["factory_site/settings.py"])


def test_without_authoritative_evidence_the_agents_report_decides(flow):
    _, attempt = flow.claimed()
    agents = flow.attach(attempt, cobertura(0.9), kind="coverage")

    verdict = check("coverage", attempt, {"threshold": 0.8})

    assert (verdict.passed, verdict.details["decided_on"]) == (True, [agents.pk])


def test_human_evidence_is_not_authoritative_and_does_not_outvote_the_agent(flow):
    _, attempt = flow.claimed()
    flow.attach(attempt, cobertura(0.99), kind="coverage", actor=flow.reviewer)
    newest_agents = flow.attach(attempt, cobertura(0.5), kind="coverage")

    verdict = check("coverage", attempt, {"threshold": 0.8})

    assert (verdict.passed, verdict.details["report"]) == (False, newest_agents.pk)


def test_every_gate_that_reads_reports_gets_them_through_the_one_rule(flow):
    class CountsJSON(Gate):
        name = "counts-json"

        def check(self, attempt, params, policy):
            chosen = self.reports(attempt, Kind.JSON)
            return Verdict(True, "", chosen.details())

    _, attempt = flow.claimed()
    agents = flow.attach(attempt, b"{}", kind="json", name="a.json")
    verifiers = flow.attach(attempt, b"[]", kind="json", name="v.json", actor=flow.verifier)

    verdict = CountsJSON().check(attempt, {}, {})

    assert verdict.details == {"decided_on": [verifiers.pk], "set_aside": [agents.pk]}


@pytest.mark.parametrize(
    ("provenances", "deciding"),
    [
        (["agent", "verifier", "agent"], ["verifier"]),
        (["agent", "runner"], ["runner"]),
        (["agent", "human"], ["agent", "human"]),
        (["gate", "agent"], ["agent"]),
        (["gate"], []),
    ],
)
def test_decisive_keeps_authoritative_rows_where_any_exist_and_never_a_gates(provenances, deciding):
    class Row:
        def __init__(self, provenance):
            self.provenance = provenance

    assert [r.provenance for r in decisive([Row(p) for p in provenances])] == deciding


# --- gate reports never prove a criterion --------------------------------------------------

NOTE_CRITERIA = [
    {
        "key": "AC-1",
        "text": "The design is written down.",
        "proof": {"check": "evidence", "kind": "note"},
    }
]


def finished_gate_run_with_a_note_report(attempt):
    """A gate run that finished and stored its Markdown report: gate evidence of kind note."""
    run = GateRun.objects.create(attempt=attempt, gate="spec-current")
    run = evidence_services.gate_run_start(run=run)
    return evidence_services.gate_run_finish(
        run=run,
        outcome="passed",
        verdict={},
        summary="current",
        report=(b"# spec-current\n", Kind.NOTE, "spec-current.md", "text/markdown"),
    )


def test_a_gates_markdown_report_does_not_prove_a_criterion_needing_a_note(flow):
    _, attempt = flow.claimed(spec=flow.spec(criteria=NOTE_CRITERIA))
    run = finished_gate_run_with_a_note_report(attempt)

    verdict = check("required-evidence", attempt)

    assert (run.report.kind, run.report.provenance) == ("note", "gate")
    assert (verdict.passed, verdict.summary) == (False, "AC-1 needs note evidence")


def test_the_task_page_does_not_count_a_gates_report_as_proof_either(flow):
    _, attempt = flow.claimed(spec=flow.spec(criteria=NOTE_CRITERIA))
    finished_gate_run_with_a_note_report(attempt)

    [row] = criteria_status(attempt)

    assert (row["met"], row["evidence"], row["authoritative"]) == (False, [], False)


def test_a_gates_report_is_not_authoritative(flow):
    _, attempt = flow.claimed()
    run = finished_gate_run_with_a_note_report(attempt)

    assert run.report.authoritative is False


def test_an_agents_note_proves_a_criterion_needing_a_note(flow):
    _, attempt = flow.claimed(spec=flow.spec(criteria=NOTE_CRITERIA))
    note = flow.attach(attempt, b"# Design\n", kind="note", name="design.md", criteria=["AC-1"])

    verdict = check("required-evidence", attempt)

    assert (verdict.passed, verdict.details["criteria"][0]["evidence"]) == (True, [note.pk])


# --- diff-scope normalises paths before matching -------------------------------------------


def test_diff_scope_fails_a_path_that_climbs_out_of_an_allowed_directory(flow):
    _, attempt = flow.claimed(allowed_paths=["templates/**"])
    flow.attach(attempt, unified_diff("templates/../factory_site/settings.py"), kind="diff")

    verdict = check("diff-scope", attempt)

    assert (verdict.passed, verdict.summary) == (
        False,
        "1 path(s) escape the repository root: 'templates/../factory_site/settings.py'",
    )
    assert verdict.details["unsafe"] == [
        {"path": "templates/../factory_site/settings.py", "reason": "a '..' segment"}
    ]
    assert "'templates/../factory_site/settings.py': a '..' segment" in verdict.report


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("../outside.py", "a '..' segment"),
        ("/etc/passwd", "an absolute path"),
        ("templates\\..\\settings.py", "a backslash in the path"),
    ],
)
def test_diff_scope_fails_every_path_that_escapes_the_repository(flow, path, reason):
    _, attempt = flow.claimed(allowed_paths=["templates/**"])
    flow.attach(attempt, f"--- {path}\n+++ {path}\n@@ -1 +1 @@\n-a\n+b\n".encode(), kind="diff")

    verdict = check("diff-scope", attempt)

    assert (verdict.passed, verdict.details["unsafe"]) == (
        False,
        [{"path": path, "reason": reason}],
    )


def test_diff_scope_fails_an_escaping_path_even_without_a_boundary(flow):
    _, attempt = flow.claimed()
    flow.attach(attempt, unified_diff("docs/../../etc/passwd"), kind="diff")

    verdict = check("diff-scope", attempt)

    assert (verdict.passed, verdict.summary) == (
        False,
        "1 path(s) escape the repository root: 'docs/../../etc/passwd'",
    )


def test_diff_scope_matches_a_path_after_removing_redundant_segments(flow):
    _, attempt = flow.claimed(allowed_paths=["templates/**"])
    flow.attach(attempt, unified_diff("templates/./tasks//page.html"), kind="diff")

    verdict = check("diff-scope", attempt)

    assert (verdict.passed, verdict.details["files"]) == (True, ["templates/tasks/page.html"])


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("", "an empty path"),
        ("a\x00b", "a control character (NUL, newline…) in the path"),
        ("a\nb", "a control character (NUL, newline…) in the path"),
        ("C:/Windows/system.ini", "an absolute path"),
        ("./.", "a path that names no file inside the repository"),
    ],
)
def test_repo_path_refuses_what_names_no_file_inside_the_repository(path, reason):
    with pytest.raises(UnsafePath) as refused:
        repo_path(path)

    assert str(refused.value) == reason
