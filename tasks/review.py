"""The record of what applied: what was in force when a reviewer decided an attempt.

A verdict is only as good as what it was judged against. ``in_force`` takes, inside the
review's transaction, the spec version the attempt was held to, the accepted decisions
that bound the task, the project's gate policy and the attempt's gate verdicts, and the
commit the runner verified; the review stores it on the attempt (``Attempt.applied``),
where later versions and decisions cannot reach it.
"""

from django.utils import timezone

from decisions.models import SpecVersionState
from tasks.context import accepted_decisions
from tasks.models import Attempt, Task


def in_force(task: Task, attempt: Attempt) -> dict:
    version = attempt.spec_version
    current = None
    if task.spec_id:
        current = (
            task.spec.versions.filter(state=SpecVersionState.ACCEPTED)
            .values_list("number", flat=True)
            .first()
        )
    runs = list(attempt.gate_runs.order_by("gate"))
    runner = next((run for run in runs if run.gate == "runner"), None)
    return {
        "at": timezone.now().isoformat(),
        "spec": (
            {"key": version.spec.key, "version": version.number, "current_version": current}
            if version is not None
            else None
        ),
        "decisions": [
            {"key": d.key, "title": d.title} for d in accepted_decisions(task).only("key", "title")
        ],
        "gate_policy": task.project.gate_policy,
        "gates": [{"gate": r.gate, "state": r.state, "summary": r.summary} for r in runs],
        "commit": (attempt.change or {}).get("commit"),
        "runner": (
            {"state": runner.state, "commit": (runner.verdict or {}).get("commit")}
            if runner is not None
            else None
        ),
    }


def applied_text(applied: dict | None) -> str:
    """One line for a page: "FM-S1 v2, decisions FM-D3, FM-D5, gates tests-pass passed"."""
    if not applied:
        return ""
    parts = []
    spec = applied.get("spec")
    parts.append(f"{spec['key']} v{spec['version']}" if spec else "no spec")
    decisions = [d["key"] for d in applied.get("decisions", [])]
    parts.append("decisions " + ", ".join(decisions) if decisions else "no decisions")
    gates = [f"{g['gate']} {g['state']}" for g in applied.get("gates", [])]
    parts.append("gates " + ", ".join(gates) if gates else "no gates")
    runner = applied.get("runner")
    if runner and runner.get("commit"):
        parts.append(f"runner at {runner['commit'][:12]}")
    elif applied.get("commit"):
        parts.append(f"commit {applied['commit'][:12]}")
    return ", ".join(parts)
