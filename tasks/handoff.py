"""The handoff test, answered for any task at any moment.

1. What changed?  2. Why did it change?  3. What remains open?
4. Which evidence is authoritative?  Built only from recorded state, never from
anyone's memory of a conversation.
"""

from decisions.models import Decision, DecisionState
from evidence.selectors import authoritative_evidence, criteria_status
from tasks.context import evidence_url
from tasks.models import AttemptState, Task, TaskState

NEXT_STEP = {
    TaskState.DRAFT: "a manager publishes it",
    TaskState.READY: "an agent claims it",
    TaskState.CLAIMED: "the agent holding it submits or releases it",
    TaskState.CHECKING: "the gates finish checking the submission",
    TaskState.IN_REVIEW: "a reviewer approves or rejects it",
    TaskState.DONE: "nothing: it is done",
    TaskState.BLOCKED: "a manager clears the blocker and unblocks it",
    TaskState.FAILED: "a manager reopens it with a fresh attempt budget",
    TaskState.CANCELLED: "nothing: it was cancelled",
}


def latest_submitted(task: Task):
    """The attempt the task's result is about: the newest one that was submitted."""
    return (
        task.attempts.filter(submitted_at__isnull=False)
        .select_related("agent", "reviewed_by", "spec_version__spec", "task")
        .prefetch_related("gate_runs", "spec_version__criteria")
        .order_by("-number")
        .first()
    )


def _evidence_entry(evidence) -> dict:
    return {
        "id": evidence.pk,
        "kind": evidence.kind,
        "name": evidence.name,
        "provenance": evidence.provenance,
        "sha256": evidence.sha256,
        "url": evidence_url(evidence.pk),
    }


def handoff(task: Task) -> dict:
    attempt = latest_submitted(task)
    changed = None
    if attempt is not None:
        files = sorted(
            {
                path
                for e in attempt.evidence.filter(kind="diff")
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
    decisions = Decision.objects.filter(tasks=task).order_by("number")
    why = {
        "task": task.description,
        "spec": (
            {"key": attempt.spec_version.spec.key, "version": attempt.spec_version.number}
            if attempt is not None and attempt.spec_version_id
            else None
        ),
        "decisions": [
            {"key": d.key, "title": d.title, "state": d.state}
            for d in decisions
            if d.state == DecisionState.ACCEPTED
        ],
    }
    status = criteria_status(attempt)
    failed_gates = (
        [
            {"gate": run.gate, "summary": run.summary}
            for run in attempt.gate_runs.all()
            if run.counts_as_failure
        ]
        if attempt is not None
        else []
    )
    last_rejection = (
        task.attempts.filter(state=AttemptState.REJECTED)
        .order_by("-number")
        .values("number", "end_reason")
        .first()
    )
    still_open = {
        "state": task.state,
        "next": NEXT_STEP[task.state],
        "unmet_criteria": [
            {"key": row["criterion"].key, "text": row["criterion"].text}
            for row in status
            if not row["met"]
        ],
        "failed_gates": failed_gates,
        "proposed_decisions": [
            {"key": d.key, "title": d.title} for d in decisions if d.state == DecisionState.PROPOSED
        ],
        "dependencies_open": list(
            task.depends_on.exclude(state=TaskState.DONE)
            .order_by("number")
            .values_list("key", flat=True)
        ),
        "last_rejection": (
            {
                "attempt": f"{task.key}#{last_rejection['number']}",
                "reason": last_rejection["end_reason"],
            }
            if last_rejection
            else None
        ),
    }
    return {
        "task": task.key,
        "what_changed": changed,
        "why": why,
        "what_remains_open": still_open,
        "authoritative_evidence": [_evidence_entry(e) for e in authoritative_evidence(attempt)],
    }
