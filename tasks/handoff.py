"""The handoff test, answered for any task at any moment.

1. What changed?  2. Why did it change?  3. What remains open?
4. Which evidence is authoritative?  Built only from recorded state, never from
anyone's memory of a conversation. ``load`` reads what the answers need (a fixed
number of queries); ``answer`` composes them, so the task page reuses what it loaded.
"""

from dataclasses import dataclass, field

from decisions.models import Decision, DecisionState
from evidence.selectors import authoritative_evidence, criteria_status
from tasks.context import evidence_url
from tasks.models import Attempt, AttemptState, Task, TaskState

NEXT_STEP = {
    TaskState.DRAFT: "a manager publishes it",
    TaskState.READY: "an agent claims it",
    TaskState.CLAIMED: "the agent holding it submits or releases it",
    TaskState.CHECKING: "the gates finish checking the submission",
    TaskState.IN_REVIEW: "a reviewer approves or rejects it",
    TaskState.APPROVED: "the merge queue lands its approved change, or sends it back with why",
    TaskState.DONE: "nothing: it is done",
    TaskState.BLOCKED: "a manager clears the blocker and unblocks it",
    TaskState.FAILED: "a manager reopens it with a fresh attempt budget",
    TaskState.CANCELLED: "nothing: it was cancelled",
}


@dataclass
class Material:
    """What the handoff answers are built from, for one task."""

    task: Task
    attempts: list = field(default_factory=list)  # all, oldest first
    attempt: Attempt | None = None  # the newest submitted one
    evidence: list = field(default_factory=list)  # of ``attempt``, with criteria
    runs: list = field(default_factory=list)  # of ``attempt``
    criteria: list = field(default_factory=list)  # of ``attempt``'s spec version
    decisions: list = field(default_factory=list)  # about the task, or proposed during it
    open_dependencies: list = field(default_factory=list)


def load(task: Task, number: int | None = None, *, latest: bool = False) -> Material:
    """Read everything the answers need, about one attempt.

    The attempt is the one numbered ``number`` if there is one, else the newest
    submitted one, else (with ``latest``) the newest of all.
    """
    attempts = list(
        task.attempts.select_related("agent", "reviewed_by", "spec_version__spec").order_by(
            "number"
        )
    )
    attempt = next((a for a in attempts if number and a.number == number), None)
    if attempt is None:
        attempt = next((a for a in reversed(attempts) if a.submitted_at), None)
    if attempt is None and latest and attempts:
        attempt = attempts[-1]
    material = Material(task=task, attempts=attempts, attempt=attempt)
    if attempt is not None:
        material.evidence = list(attempt.evidence.prefetch_related("criteria").order_by("id"))
        material.runs = list(attempt.gate_runs.order_by("gate"))
        if attempt.spec_version_id:
            material.criteria = list(attempt.spec_version.criteria.all())
    linked = Decision.tasks.through.objects.filter(task_id=task.pk).values("decision_id")
    material.decisions = list(
        Decision.objects.filter(pk__in=linked)
        .select_related("proposed_by", "decided_by", "proposed_in")
        .prefetch_related("superseded_by")
        .order_by("number")
    )
    material.open_dependencies = list(
        task.depends_on.exclude(state=TaskState.DONE)
        .order_by("number")
        .values_list("key", flat=True)
    )
    return material


def _evidence_entry(evidence) -> dict:
    return {
        "id": evidence.pk,
        "kind": evidence.kind,
        "name": evidence.name,
        "provenance": evidence.provenance,
        "sha256": evidence.sha256,
        "url": evidence_url(evidence.pk),
    }


def answer(material: Material) -> dict:
    task, attempt = material.task, material.attempt
    changed = None
    if attempt is not None:
        files = sorted(
            {
                path
                for e in material.evidence
                if e.kind == "diff"
                for path in e.summary.get("paths", [])
            }
        )
        changed = {
            "attempt": str(attempt),
            "agent": attempt.agent.get_username(),
            "state": attempt.state,
            "summary": attempt.summary,
            "change": attempt.change,
            "files": files,
        }
    version = attempt.spec_version if attempt is not None else None
    why = {
        "task": task.description,
        "spec": {"key": version.spec.key, "version": version.number} if version else None,
        "decisions": [
            {"key": d.key, "title": d.title, "state": d.state}
            for d in material.decisions
            if d.state == DecisionState.ACCEPTED
        ],
    }
    status = criteria_status(
        attempt, evidence=material.evidence, runs=material.runs, criteria=material.criteria
    )
    rejected = [a for a in material.attempts if a.state == AttemptState.REJECTED]
    still_open = {
        "state": task.state,
        "next": NEXT_STEP[task.state],
        "unmet_criteria": [
            {"key": row["criterion"].key, "text": row["criterion"].text}
            for row in status
            if not row["met"]
        ],
        "failed_gates": [
            {"gate": run.gate, "summary": run.summary}
            for run in material.runs
            if run.counts_as_failure
        ],
        "proposed_decisions": [
            {"key": d.key, "title": d.title}
            for d in material.decisions
            if d.state == DecisionState.PROPOSED
        ],
        "dependencies_open": material.open_dependencies,
        "last_rejection": (
            {"attempt": str(rejected[-1]), "reason": rejected[-1].end_reason} if rejected else None
        ),
    }
    return {
        "task": task.key,
        "what_changed": changed,
        "why": why,
        "what_remains_open": still_open,
        "authoritative_evidence": [
            _evidence_entry(e) for e in authoritative_evidence(attempt, material.evidence)
        ],
    }


def handoff(task: Task) -> dict:
    """The four answers for ``task`` as JSON-ready data."""
    return answer(load(task))
