"""Reads for evidence: what proves each acceptance criterion of an attempt."""

from decisions.models import Check
from evidence.models import Evidence, GateRunState, Kind, decisive


def proof_kind(criterion) -> str | None:
    """The kind of evidence a criterion's check needs (None for a review criterion)."""
    check = criterion.proof.get("check")
    if check == Check.TESTS:
        return Kind.JUNIT
    return criterion.proof.get("kind") if check == Check.EVIDENCE else None


def proof_of(criterion, evidence) -> list[Evidence]:
    """The evidence that proves ``criterion``, out of an attempt's ``evidence`` (with criteria).

    Evidence of the kind its check needs, as the rule of trust allows
    (``evidence.models.decisive``: never a gate's report, and only authoritative rows
    where any exist); of those, the ones that name the criterion if any do, else all.
    Empty for a criterion judged in review. The required-evidence gate and the task
    page both ask this, so they cannot disagree.
    """
    kind = proof_kind(criterion)
    if kind is None:
        return []
    of_kind = decisive([e for e in evidence if e.kind == kind])
    naming = [e for e in of_kind if criterion.pk in {c.pk for c in e.criteria.all()}]
    return naming or of_kind


def criteria_status(attempt, *, evidence=None, runs=None, criteria=None) -> list[dict]:
    """Each criterion of the attempt's pinned spec version, beside the evidence that proves it.

    A ``tests`` criterion is met by JUnit evidence (naming the criterion, or any JUnit
    when none names it) with the ``tests-pass`` gate not failed; an ``evidence``
    criterion by evidence of its kind; a ``review`` criterion by an approval. Callers
    that already loaded the attempt's evidence (with criteria), gate runs or criteria
    pass them in.
    """
    if attempt is None or attempt.spec_version_id is None:
        return []
    if evidence is None:
        evidence = list(attempt.evidence.prefetch_related("criteria").order_by("id"))
    if runs is None:
        runs = list(attempt.gate_runs.all())
    if criteria is None:
        criteria = list(attempt.spec_version.criteria.all())
    gates = {run.gate: run for run in runs}
    tests_gate = gates.get("tests-pass")
    rows = []
    for criterion in criteria:
        check = criterion.proof.get("check")
        candidates = proof_of(criterion, evidence)
        if check == Check.TESTS:
            passed = all(
                (e.summary.get("failed", 0) + e.summary.get("error", 0)) == 0
                and e.summary.get("tests", 0) > 0
                for e in candidates
            )
            gate_ok = tests_gate is None or tests_gate.state == GateRunState.PASSED
            met = bool(candidates) and passed and gate_ok
        elif check == Check.EVIDENCE:
            met = bool(candidates)
        else:
            met = attempt.state == "approved"
        rows.append(
            {
                "criterion": criterion,
                "evidence": candidates,
                "met": met,
                "authoritative": any(e.authoritative for e in candidates),
                "gate": gates.get(
                    {Check.TESTS: "tests-pass", Check.EVIDENCE: "required-evidence"}.get(check, "")
                ),
            }
        )
    return rows


def authoritative_evidence(attempt, evidence=None) -> list[Evidence]:
    if attempt is None:
        return []
    rows = evidence if evidence is not None else attempt.evidence.order_by("id")
    return [e for e in rows if e.authoritative]


def _tests_said(summary: dict) -> str:
    failed = summary.get("failed", 0) + summary.get("error", 0)
    if failed:
        return f"{failed} of {summary.get('tests', 0)} tests failed"
    return f"{summary.get('passed', 0)} passed"


def runner_view(runs, evidence) -> dict | None:
    """What the runner measured for an attempt, for its page; None when it has no runner.

    ``disagreements`` name each self-reported report whose reading differs from the
    runner's (``agent: 2 passed; runner: 1 of 2 tests failed``), so a reviewer sees a
    false claim at a glance.
    """
    run = next((run for run in runs if run.gate == "runner"), None)
    if run is None:
        return None
    measured = {e.kind: e for e in evidence if e.provenance == "runner"}
    disagreements = []
    for e in evidence:
        if e.provenance != "agent" or e.kind not in measured:
            continue
        theirs, ours = e.summary, measured[e.kind].summary
        if e.kind == Kind.JUNIT and _tests_said(theirs) != _tests_said(ours):
            disagreements.append((e, f"agent: {_tests_said(theirs)}; runner: {_tests_said(ours)}"))
        elif e.kind == Kind.COVERAGE and theirs.get("line_rate") != ours.get("line_rate"):
            said = f"agent: line rate {theirs.get('line_rate', 0):.1%}; "
            disagreements.append((e, said + f"runner: {ours.get('line_rate', 0):.1%}"))
        elif e.kind == Kind.DIFF and set(theirs.get("paths", [])) != set(ours.get("paths", [])):
            hidden = sorted(set(ours.get("paths", [])) - set(theirs.get("paths", [])))
            said = f"agent: {theirs.get('files_changed', 0)} files; "
            said += f"runner: {ours.get('files_changed', 0)} files"
            disagreements.append(
                (e, said + (f" (not in the agent's: {', '.join(hidden[:5])})" if hidden else ""))
            )
    verdict = run.verdict or {}
    return {
        "run": run,
        "verified": bool(verdict.get("verified")),
        "commit": verdict.get("commit", ""),
        "seconds": verdict.get("seconds"),
        "steps": verdict.get("steps", []),
        "problems": verdict.get("problems", []),
        "log": measured.get(Kind.LOG),
        "junit": measured.get(Kind.JUNIT),
        "disagreements": [{"evidence": e, "said": said} for e, said in disagreements],
    }
