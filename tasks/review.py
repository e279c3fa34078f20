"""The review: the reviewer's verdict on a task in review (``task_review``, and its two
halves ``task_approve`` and ``task_reject``), and the record it keeps of what was in force
when a reviewer decided an attempt, and of the verdict on each of its criteria.

A verdict is only as good as what it was judged against. ``in_force`` takes, inside the
review's transaction, the spec version the attempt was held to, the accepted decisions
that bound the task, the project's gate policy and the attempt's gate verdicts, and the
commit the runner verified; the review stores it on the attempt (``Attempt.applied``),
where later versions and decisions cannot reach it.
"""

from collections.abc import Iterable

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from decisions.models import Check, SpecVersionState
from evidence.selectors import criteria_status, measured_run
from projects.fsm import check, fire
from projects.queue import enqueue_on_commit
from projects.services import check_storable
from tasks.comments import comment_add
from tasks.context import accepted_decisions
from tasks.landing import LAND_JOB, queued_landing
from tasks.models import Attempt, Task, TaskState
from tasks.services import lock_landing_mode, lock_task_and_attempt

# --- The verdict --------------------------------------------------------------------------


def task_review(
    *,
    task: Task,
    actor,
    verdict: str,
    reason: str = "",
    criteria: Iterable[dict] = (),
    comments: Iterable[dict] = (),
) -> Task:
    """The reviewer's verdict on a task in review, and on its attempt.

    ``approve``: in review → done (or → approved, queued to land, when the project's
    landing is on: ``tasks.landing``), when every criterion of the pinned version is met or
    not applicable and each ``review`` criterion is marked (``criteria``: ``[{key,
    verdict: met|not_met|na, note}]``; ``judge``). ``reject``: in review →
    ready (or failed when its attempts are used up), with a reason or a criterion marked
    not met, which the next attempt can act on. Only a reviewer of the project who did
    not submit the attempt (403 ``own_work``); each state machine's transition checks it,
    once. The attempt keeps each criterion's verdict and what was in force when it was
    judged (``in_force``), whatever changes after. ``comments``
    (``comment_add``'s fields) are written with the verdict, or nothing is.
    """
    if verdict not in ("approve", "reject"):
        raise ValidationError({"verdict": "choose approve or reject"})
    name, reason = verdict, (reason or "").strip()
    with transaction.atomic():
        task, attempt = lock_task_and_attempt(task_id=task.pk)
        number = attempt.number if attempt else None
        # Refuses the wrong state or the wrong reviewer before anything else is looked at.
        check(task, name, actor=actor)
        if name == "approve":
            lock_landing_mode(task)  # approved (queued to land) or done, by the mode now
        # Raised in the transaction: a refused verdict keeps nothing.
        record = judge(name, criteria, criteria_status(attempt))
        if name == "reject" and not reason:
            reason = unmet_text(record)
        if name == "reject" and not reason:
            raise ValidationError(
                {
                    "reason": "a rejection needs a reason, or a criterion marked not met,"
                    " that the next attempt can act on"
                }
            )
        fire(task, name, actor=actor, reason=reason, extra={"attempt": number})
        for index, comment in enumerate(comments):
            try:
                comment_add(attempt=attempt, actor=actor, **comment)
            except ValidationError as exc:  # named by its place in the list
                raise ValidationError(
                    {f"comments[{index}].{k}": v for k, v in exc.message_dict.items()}
                ) from exc
        applied = in_force(task, attempt)
        queued = {}
        if name == "approve" and task.state == TaskState.APPROVED:
            queued = {"landing": queued_landing(attempt)}
        fire(
            attempt,
            name,
            actor=actor,
            reason=reason,
            extra={"applied": applied_text(applied), "criteria": _marked(record)},
            reviewer=actor,
            end_reason=reason,
            applied=applied,
            criteria_verdicts=record,
            **queued,
        )
    if queued:
        enqueue_on_commit(LAND_JOB, task.project_id)
    return task


def _marked(record: list[dict]) -> dict:
    """The reviewer's own marks, for the verdict's Event: ``{"AC-3": "not_met"}``."""
    return {r["key"]: r["verdict"] for r in record if r["by"] == "reviewer"}


def task_approve(*, task: Task, actor, reason: str = "", criteria: Iterable[dict] = ()) -> Task:
    """in review → done (``task_review`` with ``approve``)."""
    return task_review(task=task, actor=actor, verdict="approve", reason=reason, criteria=criteria)


def task_reject(*, task: Task, actor, reason: str, comments: Iterable[dict] = ()) -> Task:
    """in review → ready or failed, with the reason (``task_review`` with ``reject``)."""
    return task_review(task=task, actor=actor, verdict="reject", reason=reason, comments=comments)


# --- The record ---------------------------------------------------------------------------


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
    runner, measured = measured_run(attempt, runs)
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
            {"state": measured["state"], "commit": measured["commit"]}
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


VERDICTS = {"met": "met", "not_met": "not met", "na": "not applicable"}


def _clean_marks(marks, known: set[str]) -> dict[str, dict]:
    """The reviewer's marks by key, or a ValidationError naming ``criteria[i].field``."""
    if not isinstance(marks, (list, tuple)):
        raise ValidationError({"criteria": "a list of {key, verdict, note}"})
    cleaned, errors = {}, {}
    for index, mark in enumerate(marks):
        where = f"criteria[{index}]"
        if not isinstance(mark, dict):
            errors[where] = "an object with key, verdict and note"
            continue
        key, verdict = mark.get("key"), mark.get("verdict")
        note = mark.get("note") or ""
        if not isinstance(key, str) or key not in known:
            errors[f"{where}.key"] = (
                f"not a criterion of the pinned version ({', '.join(sorted(known)) or 'none'})"
            )
        elif key in cleaned:
            errors[f"{where}.key"] = f"{key} is marked twice"
        if verdict not in VERDICTS:
            errors[f"{where}.verdict"] = "met, not_met or na"
        if not isinstance(note, str) or len(note) > settings.FACTORY_COMMENT_MAX_CHARS:
            errors[f"{where}.note"] = (
                f"text of at most {settings.FACTORY_COMMENT_MAX_CHARS} characters"
            )
        else:
            check_storable(note, f"{where}.note")
        if not errors:
            cleaned[key] = {"verdict": verdict, "note": note.strip(), "index": index}
    if errors:
        raise ValidationError(errors)
    return cleaned


def judge(verdict: str, marks: Iterable[dict], rows: list[dict]) -> list[dict]:
    """Each criterion's verdict for a review, in the pinned version's order.

    ``rows`` are the attempt's criteria as the evidence and gates show them
    (``evidence.selectors.criteria_status``). A criterion proven by tests or evidence keeps
    that verdict unless the reviewer overrules it, which needs a note; a ``review``
    criterion has only the reviewer's mark. Approval needs every ``review`` criterion
    marked and every criterion met or not applicable; the ValidationError names which.
    """
    known = {row["criterion"].key for row in rows}
    cleaned = _clean_marks(marks, known)
    record, overruled = [], {}
    for row in rows:
        criterion = row["criterion"]
        check = criterion.proof.get("check")
        gate = None if check == Check.REVIEW else ("met" if row["met"] else "not_met")
        mark = cleaned.get(criterion.key)
        if mark and gate is not None and mark["verdict"] != gate and not mark["note"]:
            overruled[f"criteria[{mark['index']}].note"] = (
                f"{criterion.key}: overruling the evidence's verdict ({VERDICTS[gate]}) needs a note"
            )
        record.append(
            {
                "key": criterion.key,
                "check": check,
                "verdict": mark["verdict"] if mark else gate,
                "note": mark["note"] if mark else "",
                "by": "reviewer" if mark else ("evidence" if gate else None),
                "gate": gate,
            }
        )
    if overruled:
        raise ValidationError(overruled)
    if verdict == "approve":
        unmarked = [r["key"] for r in record if r["verdict"] is None]
        if unmarked:
            raise ValidationError(
                {
                    "criteria": f"mark each criterion judged in review before approving: {', '.join(unmarked)}"
                }
            )
        unmet = [r["key"] for r in record if r["verdict"] == "not_met"]
        if unmet:
            raise ValidationError(
                {
                    "criteria": f"approval needs every criterion met or not applicable; not met: {', '.join(unmet)}"
                }
            )
    return record


def unmet_text(record: list[dict]) -> str:
    """The criteria a reviewer marked not met, as a rejection's reason: "not met: AC-3 (why)"."""
    unmet = [
        r["key"] + (f" ({r['note']})" if r["note"] else "")
        for r in record
        if r["verdict"] == "not_met" and r["by"] == "reviewer"
    ]
    return "not met: " + "; ".join(unmet) if unmet else ""
