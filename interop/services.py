"""Imports of a team's files, and exports back to their formats.

An import is read (``interop.archive``), parsed by its format (``interop.formats``) and
written by ``interop.importer`` inside one transaction. A dry run (the default everywhere)
is the same run rolled back: its report is exactly what applying would do. Applying a
checked run reads the same bytes again, so what is applied is what was checked, on the
project as it is then; it writes everything or nothing and records one Event.
"""

import hashlib
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from interop import exporter, importer, origins
from interop.archive import ArchiveError, read_upload
from interop.documents import Refusal
from interop.formats import READERS
from interop.models import ImportRun, ImportState
from projects.errors import Conflict, ServiceError, TooLarge
from projects.fsm import fire
from projects.models import Project
from projects.roles import Role
from projects.services import check_storable, require_role

EXPORTS = ("madr", "beads", "speckit")


def upload_bytes(upload) -> bytes:
    """An uploaded file's bytes; 413 ``too_large`` before reading one over the limit
    (``interop.archive`` checks the bytes again, for callers that hand it bytes)."""
    limit = settings.FACTORY_IMPORT_MAX_BYTES
    if upload.size > limit:
        raise TooLarge(f"file: the upload is {upload.size} bytes; the limit is {limit}")
    return upload.read()


def _files(name: str, data: bytes) -> dict[str, bytes]:
    try:
        return read_upload(name, data)
    except ArchiveError as exc:
        error = TooLarge if exc.code.startswith("too_large") else ServiceError
        raise error(f"file: {exc}", code=exc.code) from exc


def _plan(run: ImportRun) -> dict:
    """Parse the run's upload and write it; the caller commits or rolls back."""
    files = _files(run.name, bytes(run.upload))
    reader = READERS[run.format]
    try:
        parsed = (
            reader.parse(files, mapping=run.mapping)
            if run.format == "speckit"
            else reader.parse(files)
        )
    except Refusal as exc:
        raise ServiceError(
            f"file: {exc}", code=exc.code, extra={"source": str(exc.source)}
        ) from exc
    return importer.write(
        project=run.project,
        actor=run.actor,
        format=run.format,
        origin_name=run.origin_name,
        parsed=parsed,
    )


def import_check(
    *,
    project: Project,
    actor,
    format: str,
    name: str,
    data: bytes,
    mapping: dict | None = None,
    origin_name: str | None = None,
) -> ImportRun:
    """A dry run: what importing ``data`` would do, as a checked ImportRun with its report.

    Managers only (403). An unknown format is a 400 naming ``format``, an origin name that
    breaks ``interop.origins``' rule one naming ``origin_name``; an upload that is not a safe
    archive of a readable size is a 400 or 413 with its code (``unsafe_path``,
    ``too_large_expanded``, …). Nothing but the ImportRun is kept.

    The rows' origins carry ``origin_name``, by default the file's name less its extension
    (``service-a.zip`` → ``service-a``): the same upload again matches what it made, another
    one (``service-b.zip``) never does, even where both hold ``docs/decisions/0013``.
    """
    require_role(actor, project.pk, Role.MANAGER)
    if format not in READERS:
        raise ValidationError({"format": f"one of {', '.join(READERS)}"})
    if mapping is not None and not isinstance(mapping, dict):
        raise ValidationError({"mapping": "an object of criterion keys to proofs"})
    if origin_name is not None and not origins.valid_origin_name(origin_name):
        raise ValidationError({"origin_name": origins.ORIGIN_NAME_RULE})
    name = name[:255]
    check_storable(mapping, "mapping")  # it is kept with the run, in a JSON column
    run = ImportRun(
        project=project,
        actor=actor,
        format=format,
        name=name,
        origin_name=origins.default_origin_name(name) if origin_name is None else origin_name,
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        upload=data,
        mapping=mapping or {},
    )
    with transaction.atomic():
        report = _plan(run)
        transaction.set_rollback(True)  # a dry run: everything it wrote is taken back
    run.report = report
    run.save()
    return run


def import_apply(*, run: ImportRun, actor) -> ImportRun:
    """Apply a checked import: all of it or nothing, with one Event (``import``).

    The report is made again against the project as it is now; a second apply of the same
    run is a 409, and the same files imported again change nothing (every item unchanged).
    """
    with transaction.atomic():
        run = (
            ImportRun.objects.select_for_update(no_key=True, of=("self",))
            .select_related("project")
            .get(pk=run.pk)
        )
        if run.state == ImportState.APPLIED:
            # Refused by the transition below too; said here with the reason a person needs.
            raise Conflict(f"import #{run.pk} was applied already", code="invalid_state")
        # Refused whether or not the sweep has run yet: a checked upload lives a fixed time.
        if run.state == ImportState.EXPIRED or run.created_at < _keep_since(timezone.now()):
            days = settings.FACTORY_IMPORT_KEEP_DAYS
            raise Conflict(
                f"import #{run.pk} was not applied within {days} days and its upload was let "
                "go; upload the files again",
                code="import_expired",
            )
        run.actor = actor
        report = _plan(run)
        fire(run, "apply", actor=actor, extra={"counts": report["counts"]}, report=report)
    return run


def _keep_since(now: datetime) -> datetime:
    return now - timedelta(days=settings.FACTORY_IMPORT_KEEP_DAYS)


def imports_expire(*, now: datetime | None = None) -> int:
    """Expire every checked import older than ``FACTORY_IMPORT_KEEP_DAYS`` (its upload is let
    go, its report kept, an Event ``expire`` by the system); return how many. Safe to run at
    any time and from several places at once: each run is locked and looked at again."""
    since = _keep_since(now or timezone.now())
    expired = 0
    stale = ImportRun.objects.filter(state=ImportState.CHECKED, created_at__lt=since)
    for run_id in stale.values_list("pk", flat=True):
        with transaction.atomic():
            run = (
                ImportRun.objects.select_for_update(no_key=True, of=("self",))
                .filter(pk=run_id)
                .first()
            )
            if run is None or run.state != ImportState.CHECKED or run.created_at >= since:
                continue  # applied (or expired) by someone else meanwhile
            days = settings.FACTORY_IMPORT_KEEP_DAYS
            fire(run, "expire", actor=None, reason=f"not applied within {days} days")
            expired += 1
    return expired


def import_upload(
    *,
    project: Project,
    actor,
    format: str,
    name: str,
    data: bytes,
    dry_run: bool = True,
    mapping: dict | None = None,
    origin_name: str | None = None,
) -> ImportRun:
    """Check an upload and, unless ``dry_run``, apply it (the API's and the CLI's one call)."""
    run = import_check(
        project=project,
        actor=actor,
        format=format,
        name=name,
        data=data,
        mapping=mapping,
        origin_name=origin_name,
    )
    return run if dry_run else import_apply(run=run, actor=actor)


def export(
    *, project: Project, actor, format: str, spec_key: str | None = None
) -> tuple[str, str, bytes]:
    """A project's decisions as a MADR 4 folder (zip), its tasks as beads JSONL, or a spec's
    current (or latest) version as a spec-kit spec.md: ``(file name, media type, bytes)``.

    Members of the project (403 otherwise); an unknown format is a 400 naming ``format``.
    """
    require_role(actor, project.pk, *Role.values)
    if format not in EXPORTS:
        raise ValidationError({"format": f"one of {', '.join(EXPORTS)}"})
    return exporter.export(project=project, format=format, spec_key=spec_key)
