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
