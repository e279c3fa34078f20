"""Every write to evidence and gate runs.

Evidence is written once: its bytes go to content-addressed storage *outside* the
database transaction (slow I/O never holds row locks), then the row is written in a
transaction that re-checks the uploader's right to write — for an agent, the live
lease — and the quotas. If that transaction fails, a blob this call added is removed
again.
"""

import mimetypes
import traceback
from collections.abc import Iterable
from datetime import timedelta

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.files.base import ContentFile, File
from django.db import transaction
from django.db.models import Count, Q, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from evidence import storage
from evidence.gates import Attachment, Verdict
from evidence.models import (
    FINISHED_GATE_STATES,
    Evidence,
    GateRun,
    GateRunState,
    Kind,
    Provenance,
)
from evidence.parsers import summarize
from evidence.signals import gate_run_finished
from projects import metrics
from projects.errors import Conflict, PermissionDenied, ServiceError, TooLarge
from projects.fsm import check, fire
from projects.models import Event, Project
from projects.policy import declaring, registry
from projects.queue import enqueue, enqueue_on_commit
from projects.roles import Role, has_role

GATE_RUN_JOB = "evidence.jobs.gate_run_job"

DEFAULT_MEDIA_TYPES = {
    Kind.JUNIT: "application/xml",
    Kind.COVERAGE: "application/xml",
    Kind.DIFF: "text/x-diff",
    Kind.LOG: "text/plain",
    Kind.JSON: "application/json",
    Kind.NOTE: "text/markdown",
    Kind.LINK: "text/uri-list",
}


def _provenance_for(attempt, actor) -> str:
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


def _criteria_for(attempt, keys: Iterable[str]):
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


QUOTAS = {
    ("attempt", "bytes"): "FACTORY_QUOTA_ATTEMPT_BYTES",
    ("attempt", "files"): "FACTORY_QUOTA_ATTEMPT_FILES",
    ("project", "bytes"): "FACTORY_QUOTA_PROJECT_BYTES",
    ("project", "files"): "FACTORY_QUOTA_PROJECT_FILES",
}


def _quotas() -> dict:
    return {key: getattr(settings, name) for key, name in QUOTAS.items()}


def _check_quotas(attempt, provenance: str, size: int) -> None:
    """Refuse (413 ``quota_exceeded``, with the figures) a file that would take the
    attempt's or the project's evidence of this provenance past a quota.

    Counted over the uploader's provenance only, so an agent filling its room never
    keeps out a verifier's authoritative report; gate reports are never counted. Each
    file counts its full size, even when its bytes were already stored once.
    """
    quotas = _quotas()
    scopes = {
        "attempt": Evidence.objects.filter(attempt_id=attempt.pk),
        "project": Evidence.objects.filter(project_id=attempt.task.project_id),
    }
    for scope, rows in scopes.items():
        if not (quotas[scope, "bytes"] or quotas[scope, "files"]):
            continue
        used = rows.filter(provenance=provenance).aggregate(
            files=Count("*"), bytes=Coalesce(Sum("size"), 0)
        )
        for what, adding in (("files", 1), ("bytes", size)):
            limit = quotas[scope, what]
            if limit and used[what] + adding > limit:
                owner = attempt if scope == "attempt" else f"project {attempt.task.project.slug}"
                raise TooLarge(
                    f"with this file, the {provenance} evidence of {owner} would reach"
                    f" {used[what] + adding} {what}, past its quota of {limit}",
                    code="quota_exceeded",
                    extra={"used": used[what], "limit": limit, "scope": scope, "what": what},
                )


def _lock_quotas(attempt) -> None:
    """Serialise the quota checks of one project until the transaction ends.

    Two uploads at once must not both fit under a quota that has room for one. The
    project row is locked after the attempt row (the order decision_propose takes too:
    attempt.fence, then next_key), ``FOR NO KEY UPDATE`` as ADR 0002 says.
    """
    if any(_quotas().values()):
        Project.objects.select_for_update(no_key=True, of=("self",)).values_list("pk").get(
            pk=attempt.task.project_id
        )


def _summarize(kind: str, fileobj: File) -> dict:
    return summarize(kind, fileobj)


def evidence_attach(
    *,
    attempt,
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
    ``human`` evidence, both only to a live attempt (409 ``invalid_state``). The file is
    validated and summarised by its kind (400 for a malformed or hostile file), refused
    past the size limit (413 ``too_large``) and past the attempt's and the project's
    quotas (413 ``quota_exceeded``; see ``_check_quotas``). A refused file leaves no row;
    it leaves no bytes either unless the refusal came while it was stored (a lease or a
    quota lost meanwhile), when the bytes stay, unreferenced and uncounted (ADR 0017).
    """
    if kind not in Kind.values:
        raise ValidationError({"kind": f"choose one of {', '.join(Kind.values)}"})
    # Read again through the attempt's own class: evidence sits below tasks and is handed
    # attempts, never imports them.
    attempt = type(attempt).objects.select_related("task", "spec_version").get(pk=attempt.pk)
    provenance = _provenance_for(attempt, actor)
    if provenance != Provenance.AGENT and not attempt.is_live:
        raise Conflict(
            f"{attempt} is {attempt.state}; evidence goes to a live attempt",
            code="invalid_state",
        )
    found_criteria = _criteria_for(attempt, criteria)
    size = file.size
    if size is not None and size > settings.FACTORY_MAX_UPLOAD_BYTES:
        raise TooLarge(
            f"the file is {size} bytes; the limit is {settings.FACTORY_MAX_UPLOAD_BYTES}"
        )
    if provenance == Provenance.AGENT:
        with transaction.atomic():
            attempt.fence(actor)  # fail fast before storing anything
    if size is not None:
        _check_quotas(attempt, provenance, size)  # again under the lock, once stored
    summary = _summarize(kind, file)
    name = (name or getattr(file, "name", "") or kind).rsplit("/", 1)[-1][:255]
    media_type = (
        media_type
        or getattr(file, "content_type", None)
        or DEFAULT_MEDIA_TYPES.get(kind)
        or mimetypes.guess_type(name)[0]
        or "application/octet-stream"
    )
    # Stored outside the transaction (slow I/O); bytes whose row is then refused stay
    # unreferenced, never deleted (ADR 0017).
    blob, sha256, size, _ = storage.store_blob(file, sha256=sha256, size=size)
    with transaction.atomic():
        if provenance == Provenance.AGENT:
            attempt.fence(actor)  # the lease may have run out while we stored
        _lock_quotas(attempt)
        _check_quotas(attempt, provenance, size)
        evidence = Evidence.objects.create(
            attempt=attempt,
            project_id=attempt.task.project_id,
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
        evidence._criteria_open = True  # the one moment the criteria may be written
        evidence.criteria.set(found_criteria)
        del evidence._criteria_open
    return evidence


def evidence_measured(*, attempt, files: Iterable[tuple[str, bytes, str, str]]) -> list[Evidence]:
    """Store what Factory Memory's runner measured about ``attempt`` outside its gates (the
    lander's run of a merged tree): ``(kind, content, name, media_type)`` each, as
    ``runner`` evidence, which is authoritative. The attempt may have ended (an approved
    change lands later). A file that cannot be read is stored as a log, never dropped."""
    rows = []
    for kind, content, name, media_type in files:
        try:
            summary = summarize(kind, ContentFile(content, name=name))
        except ValidationError as exc:
            kind, media_type, summary = Kind.LOG, "text/plain", {"unreadable": exc.messages}
        blob, sha256, size, _ = storage.store_blob(ContentFile(content, name=name))
        rows.append(
            Evidence.objects.create(
                attempt_id=attempt.pk,
                project_id=attempt.task.project_id,
                kind=kind,
                file=blob,
                sha256=sha256,
                size=size,
                media_type=media_type,
                name=name,
                provenance=Provenance.RUNNER,
                summary=summary,
            )
        )
    return rows


def _gate_evidence_row(
    *,
    run: GateRun,
    blob,
    kind: str,
    name: str,
    media_type: str,
    summary: dict,
    provenance: str = Provenance.GATE,
):
    """A row for bytes a gate stored itself: its report, or what it measured (the runner's)."""
    name_in_store, sha256, size = blob
    return Evidence.objects.create(
        attempt_id=run.attempt_id,
        project_id=run.attempt.task.project_id,
        kind=kind,
        file=name_in_store,
        sha256=sha256,
        size=size,
        media_type=media_type,
        name=name,
        provenance=provenance,
        summary=summary,
    )


# --- Gate runs ------------------------------------------------------------------------------


def gate_runs_create(*, attempt, policy: dict) -> list[GateRun]:
    """Create one queued run per gate of ``policy`` for a submitted attempt; idempotent.

    Called in the submitting transaction, which holds the attempt's lock; each run's job
    is sent once that transaction commits (a lost message is found by the reconciler,
    because the queued runs are in the database).
    """
    runs = []
    # A gate that measures (the runner) goes first: the others wait for its evidence and
    # are sent when it finishes (``_send_waiting``).
    firsts = _first_gates(policy)
    with transaction.atomic():
        for gate, params in sorted(policy.items()):
            run, created = GateRun.objects.get_or_create(
                attempt=attempt, gate=gate, defaults={"params": params or {}}
            )
            if created:
                run.attempt = attempt
                Event.record(run, actor=None, transition="queue", from_state="", to_state=run.state)
                if not firsts or gate in firsts:
                    enqueue_on_commit(_job_of(gate), run.pk, noting=lambda pk=run.pk: _noted(pk))
            runs.append(run)
    return runs


def _first_gates(names) -> set[str]:
    """Which of the gates ``names`` go first (measure before the others read)."""
    return set(declaring(names, "goes_first"))


def _waiting(run: GateRun) -> bool:
    """Whether ``run`` waits for a gate that goes first (the runner) to finish."""
    firsts = _first_gates(registry())
    if run.gate in firsts:
        return False
    return (
        GateRun.objects.filter(attempt_id=run.attempt_id, gate__in=firsts)
        .exclude(state__in=FINISHED_GATE_STATES)
        .exists()
    )


def _send_waiting(run: GateRun) -> None:
    """A first gate finished: send the runs of its attempt that waited for it."""
    if not _first_gates([run.gate]):
        return
    for pk, gate in GateRun.objects.filter(
        attempt_id=run.attempt_id, state=GateRunState.QUEUED
    ).values_list("pk", "gate"):
        _dispatch(pk, gate)


def _lock_run(run_id: int) -> GateRun:
    return (
        GateRun.objects.select_for_update(no_key=True, of=("self",))
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
    attachments: Iterable[Attachment] = (),
    provenance: str = Provenance.GATE,
) -> GateRun:
    """running → passed | failed | error, with the verdict and the gate's report as evidence.

    ``report`` is ``(content, kind, name, media_type)``; it is stored as ``gate``
    evidence (never authoritative, never proof of a criterion). ``attachments`` are
    what the gate measured itself (the runner's JUnit, coverage, diff and log), stored
    with ``provenance`` in the same transaction as the verdict, so a gate's result and
    its evidence are there together or not at all. A run that already finished is
    returned as it is, so a re-delivered job changes nothing; a run that is not
    running is refused (409) before anything is stored. The bytes are written outside
    the transaction; if it does not commit they stay, unreferenced (ADR 0017).
    """
    name = OUTCOME_TRANSITIONS[outcome]
    current = GateRun.objects.select_related("attempt__task").get(pk=run.pk)
    if current.state in FINISHED_GATE_STATES:
        return current
    check(current, name, actor=None)
    stored = None
    if report is not None:
        content, kind, report_name, media_type = report
        file = ContentFile(content, name=report_name)
        # The system's own output: stored as it is, never refused like an upload.
        report_summary = {"lines": content.count(b"\n")}
        blob_name_, sha256, size, _ = storage.store_blob(file)
        stored = ((blob_name_, sha256, size), kind, report_name, media_type, report_summary)
    measured = [
        (attachment, *storage.store_blob(ContentFile(attachment.content, name=attachment.name)))
        for attachment in attachments
    ]
    with transaction.atomic():
        run = _lock_run(run.pk)
        if run.state in FINISHED_GATE_STATES:
            return run  # what this delivery stored stays unreferenced (ADR 0017)
        _measured_rows(run, measured, provenance)
        evidence = None
        if stored is not None:
            blob, kind, report_name, media_type, report_summary = stored
            evidence = _gate_evidence_row(
                run=run,
                blob=blob,
                kind=kind,
                name=report_name,
                media_type=media_type,
                summary=report_summary,
            )
        fire(
            run,
            name,
            actor=None,
            reason=summary,
            verdict=verdict,
            summary=summary,
            report=evidence,
        )
        seconds = (run.finished_at - run.started_at).total_seconds()
        metrics.gate_run_finished(gate=run.gate, verdict=run.state, seconds=seconds)
    return run


def _measured_rows(run: GateRun, measured, provenance: str) -> None:
    version = run.attempt.spec_version
    criteria = {c.key: c for c in version.criteria.all()} if version is not None else {}
    for attachment, name, sha256, size, _ in measured:
        row = _gate_evidence_row(
            run=run,
            blob=(name, sha256, size),
            kind=attachment.kind,
            name=attachment.name,
            media_type=attachment.media_type,
            summary=attachment.summary,
            provenance=provenance,
        )
        claimed = [criteria[key] for key in attachment.criteria if key in criteria]
        if claimed:
            row._criteria_open = True  # the one moment the criteria may be written
            row.criteria.set(claimed)
            del row._criteria_open


# --- Running gates --------------------------------------------------------------------------


def _report(text: str, gate: str, *, error: bool = False) -> tuple[bytes, str, str, str]:
    """A gate's report as evidence: Markdown for a verdict, a plain log for a crash."""
    if error:
        return (text.encode() + b"\n", Kind.LOG, f"{gate}-error.log", "text/plain")
    return (text.encode() + b"\n", Kind.NOTE, f"{gate}.md", "text/markdown")


def gate_run_execute(*, run: GateRun) -> GateRun:
    """Run one gate on its attempt's artifacts and record the verdict; idempotent.

    A finished run is left as it is, and so is a run another delivery of its job is
    running within its time limit and grace (``_allowed_seconds``): a re-delivered job
    never runs a gate twice at once (the runner: never a second sandbox). One running
    longer is re-queued and run again, counting a try. A gate that raises is re-queued
    with a back-off until ``FACTORY_GATE_MAX_TRIES`` is spent, then finishes as
    ``error`` with the traceback as its report; a gate that overruns its time limit
    finishes the same way. Once the run has finished (now or before: a re-delivered
    job), the seam ``gate_run_finished`` tells the app above, which concludes the
    attempt when every gate of it has finished.
    """
    run = GateRun.objects.select_related("attempt__task", "attempt__spec_version__spec").get(
        pk=run.pk
    )
    attempt = run.attempt
    if run.state == GateRunState.QUEUED and _waiting(run):
        return run  # sent again when the gate it waits for finishes
    if run.state == GateRunState.RUNNING:
        allowed = timedelta(seconds=_allowed_seconds(run.gate))
        if run.started_at is not None and timezone.now() - run.started_at <= allowed:
            return run  # its job is at work elsewhere; the reconciler watches the time
        try:
            run = gate_run_requeue(
                run=run, reason="delivered again past its time limit; running it again"
            )
        except ServiceError:
            return run  # moved on meanwhile (finished, or re-queued by the reconciler)
    if run.state not in FINISHED_GATE_STATES:
        if run.state == GateRunState.QUEUED and run.tries >= settings.FACTORY_GATE_MAX_TRIES:
            # Its worker died (or overran) on every try: give up, as a failure.
            run = gate_run_start(run=run)
            reason = f"no result after {run.tries - 1} tries (worker lost or time limit)"
            gate_run_finish(
                run=run,
                outcome=GateRunState.ERROR,
                verdict={"error": reason},
                summary=reason,
                report=_report(reason, run.gate, error=True),
            )
        else:
            try:
                run = gate_run_start(run=run)
            except ServiceError:
                return run  # another delivery started it a moment ago
            _check(run, registry().get(run.gate), SoftTimeLimitExceeded)
    run.refresh_from_db()
    if run.state in FINISHED_GATE_STATES:
        _send_waiting(run)
        gate_run_finished.send(sender=GateRun, run=run, attempt_id=attempt.pk)
    return run


def _check(run: GateRun, gate, time_limit_error) -> None:
    policy = dict(run.attempt.gate_runs.values_list("gate", "params"))
    try:
        if gate is None:
            raise LookupError(f"no gate named {run.gate!r} is registered on this site")
        verdict = gate.check(run.attempt, run.params, policy)
    except time_limit_error:
        limit = gate.time_limit
        verdict = Verdict(
            False, f"the gate exceeded its time limit of {limit} s", {"error": "time limit"}
        )
        outcome = GateRunState.ERROR
    except Exception as exc:
        if run.tries < settings.FACTORY_GATE_MAX_TRIES:
            gate_run_requeue(run=run, reason=f"try {run.tries} crashed: {_said(exc)}"[:2000])
            _dispatch(run.pk, run.gate, countdown=2**run.tries)
            return
        verdict = gate.gave_up(exc, run.params) if gate is not None else None
        if verdict is None:
            trace = traceback.format_exc()
            verdict = Verdict(
                False,
                f"the gate crashed on all {run.tries} tries: {_said(exc)}"[:500],
                {"error": repr(exc)[:2000]},
                trace,
            )
            outcome = GateRunState.ERROR
        else:
            outcome = GateRunState.PASSED if verdict.passed else GateRunState.FAILED
    else:
        outcome = GateRunState.PASSED if verdict.passed else GateRunState.FAILED
    text = verdict.report or f"# {run.gate} for {run.attempt}\n\n{verdict.summary}"
    gate_run_finish(
        run=run,
        outcome=outcome,
        verdict=verdict.details,
        summary=verdict.summary[:2000],
        report=_report(text, run.gate, error=outcome == GateRunState.ERROR),
        attachments=verdict.attachments,
        provenance=gate.provenance if gate is not None else Provenance.GATE,
    )


def _said(exc: Exception) -> str:
    """An exception as a person reads it: its type and its own message (git's, say)."""
    return f"{type(exc).__name__}: {exc}"


def _dispatch(run_id: int, gate: str, countdown: float | None = None) -> None:
    """Send a run's job (again), noting when, so the reconciler knows it is on its way.

    The gate names its job, and so its queue: the runner's go to ``verify``.
    """
    _noted(run_id)
    enqueue(_job_of(gate), run_id, countdown=countdown)


def _noted(run_id: int) -> None:
    """Note that a run's job was sent now: the reconciler re-sends it only much later."""
    GateRun.objects.filter(pk=run_id).update(dispatched_at=timezone.now())


def _job_of(gate: str) -> str:
    """The job a gate names (and so its queue); the plain gate job for an unknown name."""
    known = registry().get(gate)
    return known.job if known is not None else GATE_RUN_JOB


def _allowed_seconds(gate: str) -> int:
    """How long a run of ``gate`` may be running before its worker counts as lost: the
    gate's time limit plus ``FACTORY_GATE_GRACE_SECONDS``."""
    known = registry().get(gate)
    limit = known.time_limit if known is not None else settings.FACTORY_GATE_TIME_LIMIT
    return limit + settings.FACTORY_GATE_GRACE_SECONDS


def gate_runs_reconcile() -> dict:
    """Bring every unfinished gate run forward from what the database says.

    Re-queues runs whose worker died (running longer than the time limit plus a grace
    period) and re-dispatches queued runs whose job never started (a lost or flushed
    broker message). Safe to run at any time and from several places at once; the
    site's reconciler (``tasks.reconciler.reconcile``) calls it.
    """
    now = timezone.now()
    # Each gate may run for its own time limit (the runner's is longer) plus the grace.
    default = _allowed_seconds("")
    overdue = Q(started_at__lt=now - timedelta(seconds=default))
    for name in registry():
        allowed = _allowed_seconds(name)
        if allowed != default:
            overdue = (overdue & ~Q(gate=name)) | Q(
                gate=name, started_at__lt=now - timedelta(seconds=allowed)
            )
    stuck = GateRun.objects.filter(overdue, state=GateRunState.RUNNING)
    counts = {"gate_runs_requeued": 0, "gate_runs_redispatched": 0}
    for run in stuck:
        try:
            gate_run_requeue(run=run, reason="its worker stopped answering; running it again")
        except ServiceError:
            continue
        _dispatch(run.pk, run.gate)
        counts["gate_runs_requeued"] += 1

    waiting = GateRun.objects.filter(state=GateRunState.QUEUED).filter(
        Q(dispatched_at__isnull=True)
        | Q(dispatched_at__lt=now - timedelta(seconds=settings.FACTORY_GATE_REQUEUE_AFTER))
    )
    for run in waiting.only("pk", "gate", "attempt_id"):
        if _waiting(run):
            continue  # its first gate sends it
        _dispatch(run.pk, run.gate)
        counts["gate_runs_redispatched"] += 1
    return counts
