"""The context bundle: the smallest body of current material that lets an agent act.

Assembled from versioned sources only — the task, its pinned spec version and
criteria, the accepted decisions that concern it, the earlier attempts and the
latest checkpoint — so the same sources always give the same ``bundle_sha256``.
Its cost grows with the material relevant to the task (a fixed number of queries,
each bounded by this task's own rows), never with the size of the project.

With ``max_chars`` the items are added most relevant first until the budget is
spent; the manifest lists every item, included or dropped. For a Markdown brief
(``markdown=True``, rendered by ``tasks.brief``) each item is measured as its Markdown,
so the same trimming bounds the brief itself.
"""

import hashlib
import json
from dataclasses import dataclass, field

from django.db.models import F, Prefetch

from decisions.models import Check, Decision, DecisionState, SpecVersion
from evidence.models import Evidence, GateRun
from tasks import brief
from tasks.models import Attempt, AttemptState, LineComment, Task, TaskState


def canonical(value) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def sha256_of(value) -> str:
    return hashlib.sha256(canonical(value).encode()).hexdigest()


def evidence_url(evidence_id: int) -> str:
    return f"/api/v1/evidence/{evidence_id}/content/"


PROOF_NEEDS = {
    Check.TESTS: "JUnit evidence in which the tests matching {select} ran and passed",
    Check.EVIDENCE: "{kind} evidence attached to the attempt and naming this criterion",
    Check.REVIEW: "a reviewer's approval",
}


def proof_needs(proof: dict) -> str:
    """The finish condition of a criterion, in words."""
    return PROOF_NEEDS.get(proof.get("check"), "unknown check").format(**proof)


@dataclass
class Item:
    kind: str
    id: str
    section: str
    content: dict
    version: int | None = None
    required: bool = False
    sha256: str = field(init=False)
    chars: int = field(init=False)

    def __post_init__(self):
        text = canonical(self.content)
        self.chars = len(text)
        self.sha256 = hashlib.sha256(text.encode()).hexdigest()

    def manifest(self, included: bool) -> dict:
        entry = {"kind": self.kind, "id": self.id, "chars": self.chars, "included": included}
        if self.version is not None:
            entry["version"] = self.version
        else:
            entry["sha256"] = self.sha256
        return entry


def _task_item(task: Task) -> Item:
    content = {
        "key": task.key,
        "title": task.title,
        "description": task.description,
        "state": task.state,
        "priority": task.priority,
        "labels": sorted(label.name for label in task.labels.all()),
        "allowed_paths": task.allowed_paths,
        "depends_on": [d.key for d in task.depends_on.all()],
        "attempts_used": task.failed_attempts,
        "max_attempts": task.max_attempts,
    }
    return Item("task", task.key, "task", content, required=True)


def _spec_item(version) -> Item:
    criteria = [
        {"key": c.key, "text": c.text, "proof": c.proof, "needs": proof_needs(c.proof)}
        for c in version.criteria.all()
    ]
    content = {
        "key": version.spec.key,
        "title": version.spec.title,
        "version": version.number,
        "state": version.state,
        "body": version.body,
        "criteria": criteria,
    }
    return Item("spec_version", version.spec.key, "spec", content, version=version.number)


def _dependency_item(dep: Task) -> Item:
    content = {"key": dep.key, "title": dep.title, "state": dep.state}
    outcome = dep.current_attempt if dep.state == TaskState.DONE else None
    if outcome is not None:
        content["outcome"] = {"summary": outcome.summary, "change": outcome.change}
    return Item("dependency", dep.key, "dependencies", content)


def _decision_item(decision: Decision) -> Item:
    content = {
        "key": decision.key,
        "title": decision.title,
        "decision": decision.decision,
        "consequences": decision.consequences,
        "alternatives": decision.alternatives,
    }
    return Item("decision", decision.key, "decisions", content)


ORDER_OF_VERDICTS = {"not_met": 0, None: 1, "met": 2, "na": 3}


def _attempt_item(attempt: Attempt) -> Item:
    gates = [
        {
            "gate": run.gate,
            "state": run.state,
            "summary": run.summary,
            **({"verdict": run.verdict} if run.counts_as_failure else {}),
            **({"report": evidence_url(run.report_id)} if run.report_id else {}),
        }
        for run in attempt.gate_runs.all()
    ]
    content = {
        "number": attempt.number,
        "agent": attempt.agent.get_username(),
        "state": attempt.state,
        "ended_because": attempt.end_reason,
        "summary": attempt.summary,
        "change": attempt.change,
        "gates": gates,
        "evidence": [
            {
                "id": ev.pk,
                "kind": ev.kind,
                "name": ev.name,
                "provenance": ev.provenance,
                "sha256": ev.sha256,
                "url": evidence_url(ev.pk),
            }
            for ev in attempt.evidence.all()
        ],
    }
    content["comments"] = [
        {
            "path": c.path,
            "line": c.line,
            "end_line": c.end_line,
            "side": c.side,
            "text": c.body,
            "resolved": c.resolved_at is not None,
        }
        for c in attempt.comments.all()
    ]
    # Not met first: what the next attempt must change.
    content["criteria"] = sorted(
        (
            {"key": r["key"], "verdict": r["verdict"], "note": r["note"], "by": r["by"]}
            for r in attempt.criteria_verdicts
        ),
        key=lambda r: ORDER_OF_VERDICTS.get(r["verdict"], 1),
    )
    if attempt.landing:
        content["landing"] = landing_lesson(attempt)
    if attempt.state in (AttemptState.REJECTED, AttemptState.APPROVED):
        content["review"] = {
            "verdict": "approve" if attempt.state == AttemptState.APPROVED else "reject",
            "by": attempt.reviewed_by.get_username() if attempt.reviewed_by_id else None,
            "reason": attempt.end_reason,
        }
    return Item("attempt", str(attempt), "attempts", content)


# What a change that came back from landing asks of the next attempt.
LANDING_ADVICE = {
    "conflict": "rebase the approved change onto {target} and resolve the conflicts; a clean "
    "rebase (the same patch) goes back to the queue after its gates, without a second review",
    "failed": "rebase onto {target} and make the failing tests pass together with the changes "
    "that landed before it",
    "reverted": "a manager reverted this change after it landed on {target}, for the reason "
    "given; do the work again on {target} as it is now so that the reason no longer holds",
}


def landing_lesson(attempt: Attempt) -> dict:
    """The attempt's ``landing`` record as the next attempt reads it: what happened, and,
    if the change came back, what to do about it."""
    lesson = {k: v for k, v in attempt.landing.items() if k != "batch"}
    advice = LANDING_ADVICE.get(attempt.landing.get("state"))
    if advice:
        lesson["what_to_do"] = advice.format(target=attempt.task.project.landing_target)
    return lesson


def _checkpoint_item(attempt: Attempt) -> Item:
    content = {
        "attempt": attempt.number,
        "revision": attempt.checkpoint_revision,
        "saved_at": attempt.checkpoint_at.isoformat() if attempt.checkpoint_at else None,
        "data": attempt.checkpoint,
    }
    return Item(
        "checkpoint", str(attempt), "checkpoint", content, version=attempt.checkpoint_revision
    )


def build(
    task: Task, *, current: Attempt | None, max_chars: int | None = None, markdown: bool = False
) -> dict:
    """Assemble the bundle for ``task`` as seen from attempt ``current`` (None for a reviewer).

    With ``markdown`` the items are measured, and the budget spent, as the brief's Markdown.
    """
    task = (
        Task.objects.select_related("spec")
        .prefetch_related(
            "labels",
            Prefetch("depends_on", queryset=Task.objects.select_related("current_attempt")),
        )
        .get(pk=task.pk)
    )
    attempts = list(
        task.attempts.select_related("agent", "reviewed_by", "task__project")
        .prefetch_related(
            Prefetch("gate_runs", queryset=GateRun.objects.order_by("gate")),
            Prefetch("evidence", queryset=Evidence.objects.order_by("id")),
            # Open comments first: what the next attempt must still act on.
            Prefetch(
                "comments",
                queryset=LineComment.objects.order_by(
                    F("resolved_at").asc(nulls_first=True), "path", "line", "pk"
                ),
            ),
        )
        .order_by("-number")
    )
    current = next((a for a in attempts if current and a.pk == current.pk), None)
    if current is not None:
        version = (
            _version_with_criteria(current.spec_version_id) if current.spec_version_id else None
        )
    else:
        version = _pinned_version(task, attempts)

    items = [_task_item(task)]
    if version is not None:
        items.append(_spec_item(version))
    checkpoints = [a for a in attempts if a.checkpoint is not None and a.checkpoint_at is not None]
    if checkpoints:
        items.append(_checkpoint_item(max(checkpoints, key=lambda a: a.checkpoint_at)))
    items += [_decision_item(d) for d in accepted_decisions(task)]
    items += [_attempt_item(a) for a in attempts if a.pk != getattr(current, "pk", None)]
    items += [_dependency_item(dep) for dep in task.depends_on.all()]
    if markdown:
        for item in items:
            item.chars = len(brief.block(item.kind, item.content))
    return _assemble(items, max_chars, markdown=markdown)


def _pinned_version(task: Task, attempts: list[Attempt]):
    """For a reader without an attempt: the version the latest attempt pinned, else the current one."""
    for attempt in attempts:
        if attempt.spec_version_id:
            return _version_with_criteria(attempt.spec_version_id)
    if task.spec_id:
        current = task.spec.current_version()
        return _version_with_criteria(current.pk) if current else None
    return None


def _version_with_criteria(version_id: int):
    return (
        SpecVersion.objects.select_related("spec").prefetch_related("criteria").get(pk=version_id)
    )


def accepted_decisions(task: Task):
    """Accepted decisions about the task or its spec, found through the link tables'
    indexes (an OR across the two joins would scan every decision of the project)."""
    linked = Decision.tasks.through.objects.filter(task_id=task.pk).values("decision_id")
    if task.spec_id:
        linked = linked.union(
            Decision.specs.through.objects.filter(spec_id=task.spec_id).values("decision_id")
        )
    return Decision.objects.filter(pk__in=linked, state=DecisionState.ACCEPTED).order_by("number")


def _assemble(items: list[Item], max_chars: int | None, *, markdown: bool = False) -> dict:
    sections: dict = {
        "task": None,
        "spec": None,
        "checkpoint": None,
        "decisions": [],
        "attempts": [],
        "dependencies": [],
    }
    manifest, used, footer = [], 0, 0
    if markdown and max_chars is not None:
        # The brief's footer names every item left out: reserve room to name them all,
        # and give each one's room back when it is included, so the brief stays in budget.
        everything_dropped = [item.manifest(included=item.required) for item in items]
        footer = len(brief.footer("0" * 64, everything_dropped, max_chars))
    for item in items:
        named = len(brief.mention(item.kind, item.id)) + len(", ") if footer else 0
        fits = max_chars is None or item.required or used + item.chars + footer - named <= max_chars
        manifest.append(item.manifest(included=fits))
        if not fits:
            continue
        if not item.required:
            footer -= named
        used += item.chars
        if isinstance(sections[item.section], list):
            sections[item.section].append(item.content)
        else:
            sections[item.section] = item.content
    return {
        **sections,
        "manifest": manifest,
        "chars": used,
        "max_chars": max_chars,
        "bundle_sha256": sha256_of(sections),
    }
