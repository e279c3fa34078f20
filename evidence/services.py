"""Every write to evidence and gate runs.

Evidence is written once: its bytes go to content-addressed storage *outside* the
database transaction (slow I/O never holds row locks), then the row is written in a
transaction that re-checks the uploader's right to write — for an agent, the live
lease. If that transaction fails, a blob this call added is removed again.
"""

import mimetypes
from collections.abc import Iterable

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.files.base import ContentFile, File
from django.db import transaction

from evidence import storage
from evidence.models import (
    FINISHED_GATE_STATES,
    Evidence,
    GateRun,
    GateRunState,
    Kind,
    Provenance,
)
from tasks.errors import PermissionDenied, TooLarge
from tasks.fsm import fire
from tasks.models import LIVE_ATTEMPT_STATES, Attempt, AttemptState, Event
from tasks.roles import Role, has_role
from tasks.services import (
    attempt_fence,
    attempt_gates_failed,
    attempt_gates_passed,
    lock_task_and_attempt,
)

DEFAULT_MEDIA_TYPES = {
    Kind.JUNIT: "application/xml",
    Kind.COVERAGE: "application/xml",
    Kind.DIFF: "text/x-diff",
    Kind.LOG: "text/plain",
    Kind.JSON: "application/json",
    Kind.NOTE: "text/markdown",
    Kind.LINK: "text/uri-list",
}


def _provenance_for(attempt: Attempt, actor) -> str:
    """Who is writing decides provenance; a request body never does."""
    project_id = attempt.task.project_id
    if actor is not None and actor.pk == attempt.agent_id:
        return Provenance.AGENT  # even if the agent is also a verifier: no self-certification
    if has_role(actor, project_id, Role.VERIFIER):
        return Provenance.VERIFIER
    if has_role(actor, project_id, Role.REVIEWER, Role.MANAGER):
        return Provenance.HUMAN
    raise PermissionDenied(
        "only the agent holding the attempt, or a verifier, reviewer or manager of the project,"
        " may attach evidence"
    )


def _criteria_for(attempt: Attempt, keys: Iterable[str]):
    keys = sorted({k.strip() for k in keys if k and k.strip()})
    if not keys:
        return []
    if attempt.spec_version_id is None:
        raise ValidationError({"criteria": f"{attempt.task} has no spec, so it has no criteria"})
    found = list(attempt.spec_version.criteria.filter(key__in=keys))
    missing = sorted(set(keys) - {c.key for c in found})
    if missing:
        known = ", ".join(attempt.spec_version.criteria.values_list("key", flat=True)) or "none"
        raise ValidationError(
            {"criteria": f"unknown criteria {', '.join(missing)} (this spec version has: {known})"}
        )
    return found


def _summarize(kind: str, fileobj: File) -> dict:
    from evidence.parsers import summarize

    return summarize(kind, fileobj)


def evidence_attach(
    *,
    attempt: Attempt,
    actor,
    file: File,
    kind: str,
    criteria: Iterable[str] = (),
    name: str = "",
    media_type: str = "",
    sha256: str | None = None,
) -> Evidence:
    """Attach a file to an attempt as evidence and return the stored, immutable row.

    Provenance follows the actor: the lease holder writes ``agent`` evidence (and
    needs a live lease: 409 ``lease_lost``); a verifier of the project writes
    ``verifier`` evidence, which is authoritative; reviewers and managers write
    ``human`` evidence. The file is validated and summarised by its kind
    (400 for a malformed or hostile file) and refused past the size limit (413).
    """
    if kind not in Kind.values:
        raise ValidationError({"kind": f"choose one of {', '.join(Kind.values)}"})
    attempt = Attempt.objects.select_related("task", "spec_version").get(pk=attempt.pk)
    provenance = _provenance_for(attempt, actor)
    if provenance != Provenance.AGENT and attempt.state not in LIVE_ATTEMPT_STATES:
        raise ValidationError(
            {"attempt": f"{attempt} is {attempt.state}; evidence goes to a live attempt"}
        )
    found_criteria = _criteria_for(attempt, criteria)
    size = file.size
    if size is not None and size > settings.FACTORY_MAX_UPLOAD_BYTES:
        raise TooLarge(
            f"the file is {size} bytes; the limit is {settings.FACTORY_MAX_UPLOAD_BYTES}"
        )
    if provenance == Provenance.AGENT:
        with transaction.atomic():
            attempt_fence(attempt, actor)  # fail fast before storing anything
    summary = _summarize(kind, file)
    name = (name or getattr(file, "name", "") or kind).rsplit("/", 1)[-1][:255]
    media_type = (
        media_type
        or getattr(file, "content_type", None)
        or DEFAULT_MEDIA_TYPES.get(kind)
        or mimetypes.guess_type(name)[0]
        or "application/octet-stream"
    )
    blob, sha256, size, created = storage.store_blob(file, sha256=sha256, size=size)
    try:
        with transaction.atomic():
            if provenance == Provenance.AGENT:
                attempt_fence(attempt, actor)  # the lease may have run out while we stored
            evidence = Evidence.objects.create(
                attempt=attempt,
                kind=kind,
                file=blob,
                sha256=sha256,
                size=size,
                media_type=media_type[:100],
                name=name,
                provenance=provenance,
                uploaded_by=actor,
                summary=summary,
            )
            evidence.criteria.set(found_criteria)
    except Exception:
        if created and not Evidence.objects.filter(sha256=sha256).exists():
            storage.delete_blob(blob)
        raise
    return evidence


def evidence_attach_gate(
    *, run: GateRun, content: bytes, kind: str, name: str, media_type: str
) -> Evidence:
    """Store a gate's own report as ``gate`` evidence (authoritative) on the run's attempt."""
    file = ContentFile(content, name=name)
    summary = _summarize(kind, file)
    blob, sha256, size, _ = storage.store_blob(file)
    return Evidence.objects.create(
        attempt_id=run.attempt_id,
        kind=kind,
        file=blob,
        sha256=sha256,
        size=size,
        media_type=media_type,
        name=name,
        provenance=Provenance.GATE,
        summary=summary,
    )


# --- Gate runs ------------------------------------------------------------------------------


def gate_runs_create(*, attempt: Attempt, policy: dict) -> list[GateRun]:
    """Create one queued run per gate of ``policy`` for a submitted attempt; idempotent."""
    runs = []
    with transaction.atomic():
        attempt = (
            Attempt.objects.select_for_update(of=("self",))
            .select_related("task")
            .get(pk=attempt.pk)
        )
        for gate, params in sorted(policy.items()):
            run, created = GateRun.objects.get_or_create(
                attempt=attempt, gate=gate, defaults={"params": params or {}}
            )
            if created:
                run.attempt = attempt
                Event.record(run, actor=None, transition="queue", from_state="", to_state=run.state)
            runs.append(run)
    return runs


def _lock_run(run_id: int) -> GateRun:
    return (
        GateRun.objects.select_for_update(of=("self",))
        .select_related("attempt__task")
        .get(pk=run_id)
    )


def gate_run_start(*, run: GateRun) -> GateRun:
    """queued → running, counting the try. The system only."""
    with transaction.atomic():
        run = _lock_run(run.pk)
        fire(run, "start", actor=None, extra={"try": run.tries + 1})
    return run


def gate_run_requeue(*, run: GateRun, reason: str) -> GateRun:
    """running → queued: its worker died or it overran; the reconciler runs it again."""
    with transaction.atomic():
        run = _lock_run(run.pk)
        fire(run, "requeue", actor=None, reason=reason)
    return run


OUTCOME_TRANSITIONS = {
    GateRunState.PASSED: "succeed",
    GateRunState.FAILED: "fail",
    GateRunState.ERROR: "crash",
}


def gate_run_finish(
    *,
    run: GateRun,
    outcome: str,
    verdict: dict,
    summary: str,
    report: tuple[bytes, str, str, str] | None = None,
) -> GateRun:
    """running → passed | failed | error, with the verdict and the gate's report as evidence.

    ``report`` is ``(content, kind, name, media_type)``. A run that already finished is
    returned as it is: a re-delivered job changes nothing.
    """
    with transaction.atomic():
        run = _lock_run(run.pk)
        if run.state in FINISHED_GATE_STATES:
            return run
        evidence = None
        if report is not None:
            content, kind, name, media_type = report
            evidence = evidence_attach_gate(
                run=run, content=content, kind=kind, name=name, media_type=media_type
            )
        fire(
            run,
            OUTCOME_TRANSITIONS[outcome],
            actor=None,
            reason=summary,
            verdict=verdict,
            summary=summary,
            report=evidence,
        )
    return run


def attempt_checks_conclude(*, attempt: Attempt) -> Attempt:
    """When every gate run of a checking attempt has finished, move the task on exactly once.

    All passed → in review; any failed or errored → ready (or failed when attempts are
    used up), with the failing gates and their summaries as the reason. Called after each
    gate finishes and by the reconciler; with the attempt row locked, two gates finishing
    at once still move the task on once.
    """
    with transaction.atomic():
        _, attempt = lock_task_and_attempt(attempt.pk)
        if attempt.state != AttemptState.CHECKING:
            return attempt
        runs = list(attempt.gate_runs.order_by("gate"))
        if any(run.state not in FINISHED_GATE_STATES for run in runs):
            return attempt
        failures = [run for run in runs if run.counts_as_failure]
        if failures:
            reason = "; ".join(f"{run.gate}: {run.summary}" for run in failures)
            return attempt_gates_failed(attempt=attempt, reason=f"gates failed — {reason}")
        passed = ", ".join(run.gate for run in runs) or "no gates configured"
        return attempt_gates_passed(attempt=attempt, reason=f"gates passed: {passed}")
