"""Reads for evidence: what proves each acceptance criterion of an attempt."""

from django.db.models import Count, Min

from decisions.models import Check
from evidence.models import Evidence, GateRun, GateRunState, Kind, Provenance, decisive
from projects.policy import measuring_gate


def proof_kind(criterion) -> str | None:
    """The kind of evidence a criterion's check needs (None for a review criterion)."""
    check = criterion.proof.get("check")
    if check == Check.TESTS:
        return Kind.JUNIT
    return criterion.proof.get("kind") if check == Check.EVIDENCE else None


def tested_criteria(attempt) -> dict[str, str | None]:
    """``{criterion key: its test selector}`` for each criterion of the attempt's pinned
    spec version that tests prove, in the version's order; empty without a spec.

    The one answer to "which criteria do tests prove": the tests-pass gate matches
    these selectors and the runner claims these criteria for its JUnit report.
    """
    if not attempt.spec_version_id:
        return {}
    return {
        criterion.key: criterion.proof.get("select")
        for criterion in attempt.spec_version.criteria.all()
        if criterion.proof.get("check") == Check.TESTS
    }


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


def measured_run(attempt, runs=None) -> tuple[GateRun | None, dict | None]:
    """The attempt's run of the site's measuring gate (the runner) and its summary, or
    ``(None, None)`` when it has none.

    The summary is ``{state, verified, commit, seconds, summary, tests, steps,
    problems}``; ``commit`` is the one the gate measured (None until it has). The API,
    the task page and the review record all read the runner from here. Callers that
    already loaded the attempt's gate runs pass them in.
    """
    gate = measuring_gate()
    if gate is None:
        return None, None
    if runs is None:
        runs = attempt.gate_runs.all()
    run = next((run for run in runs if run.gate == gate.name), None)
    if run is None:
        return None, None
    verdict = run.verdict or {}
    return run, {
        "state": run.state,
        "verified": bool(verdict.get("verified")),
        "commit": verdict.get("commit"),
        "seconds": verdict.get("seconds"),
        "summary": run.summary,
        "tests": verdict.get("tests") or {},
        "steps": verdict.get("steps", []),
        "problems": verdict.get("problems", []),
    }


def runner_view(attempt, runs, evidence) -> dict | None:
    """What the runner measured for an attempt, for its page; None when it has no runner.

    ``disagreements`` name each self-reported report whose reading differs from the
    runner's (``agent: 2 passed; runner: 1 of 2 tests failed``), so a reviewer sees a
    false claim at a glance.
    """
    run, summary = measured_run(attempt, runs)
    if run is None:
        return None
    provenance = measuring_gate().provenance
    # The last run's reports; an earlier run's log (a failing run the runner ran again) is
    # in the evidence list, not here.
    measured = {
        e.kind: e
        for e in evidence
        if e.provenance == provenance and not (e.summary or {}).get("earlier_run")
    }
    disagreements = []
    for e in evidence:
        if e.provenance != Provenance.AGENT or e.kind not in measured:
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
    return {
        "run": run,
        "verified": summary["verified"],
        "commit": summary["commit"] or "",
        "seconds": summary["seconds"],
        "steps": summary["steps"],
        "problems": summary["problems"],
        "log": measured.get(Kind.LOG),
        "junit": measured.get(Kind.JUNIT),
        "disagreements": [{"evidence": e, "said": said} for e, said in disagreements],
    }


def gate_run_figures(*, now) -> dict:
    """The unfinished gate runs' gauges for /metrics (``projects.metrics.GAUGES``), from
    one grouped query: how many are queued and running per gate, and how long the oldest
    has waited (a queued run since it was queued, a running one since it started)."""
    rows = (
        GateRun.objects.filter(state__in=[GateRunState.QUEUED, GateRunState.RUNNING])
        .order_by()
        .values_list("gate", "state")
        .annotate(count=Count("pk"), queued=Min("queued_at"), started=Min("started_at"))
    )
    counts, oldest = {}, {}
    for gate, state, count, queued, started in rows:
        since = queued if state == GateRunState.QUEUED else started
        counts[(gate, state)] = count
        oldest[(gate, state)] = max(0.0, (now - since).total_seconds()) if since else 0.0
    return {"factory_gate_runs_unfinished": counts, "factory_gate_run_oldest_seconds": oldest}
