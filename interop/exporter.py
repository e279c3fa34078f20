"""A project's records back out in the formats teams keep: MADR 4, beads JSONL, spec-kit.

What Factory Memory holds wins; what an import kept in ``metadata`` (a beads issue's own id,
its keys without a home here, an ADR's deciders) is given back beside it, so a file imported
and exported again reads as it did.
"""

import io
import json
import zipfile
from datetime import date, datetime

from django.db.models import Prefetch

from decisions.models import Decision, Spec, SpecVersionState
from interop.documents import CriterionDoc, DecisionDoc, Source, SpecDoc, TaskDoc
from interop.formats import beads, madr, speckit
from interop.importer import label_name, with_acceptance
from projects.errors import NotFound
from projects.models import Project
from tasks.models import Task, TaskState

# Where a task that is being worked on stands, as a file that knows only open and closed sees it.
EXPORTED_STATES = {
    TaskState.CLAIMED: TaskState.READY,
    TaskState.CHECKING: TaskState.READY,
    TaskState.IN_REVIEW: TaskState.READY,
    TaskState.FAILED: TaskState.READY,
}
SOURCE = Source("factory-memory")


def export(*, project: Project, format: str, spec_key: str | None = None) -> tuple[str, str, bytes]:
    if format == "madr":
        return f"{project.slug}-decisions.zip", "application/zip", _zip(madr_folder(project))
    if format == "beads":
        return "issues.jsonl", "application/x-ndjson", beads.write(task_docs(project))
    return "spec.md", "text/markdown; charset=utf-8", speckit_spec(project, spec_key).encode()


def _zip(folder: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in sorted(folder.items()):
            archive.writestr(f"docs/decisions/{name}", content)
    return buffer.getvalue()


def _date(value: str | None) -> date | None:
    return date.fromisoformat(value) if value else None


def decision_docs(project: Project) -> list[DecisionDoc]:
    """Every decision of the project, in number order, with its supersede links."""
    rows = list(
        Decision.objects.filter(project=project)
        .select_related("decided_by")
        .prefetch_related(Prefetch("supersedes", queryset=Decision.objects.only("number")))
        .order_by("number")
    )
    docs = []
    for row in rows:
        meta = row.metadata or {}
        decided = row.decided_at.date() if row.decided_at else None
        deciders = meta.get("deciders") or (
            [row.decided_by.get_username()] if row.decided_by else []
        )
        docs.append(
            DecisionDoc(
                external_id=f"{row.number:04d}",
                title=row.title,
                source=SOURCE,
                number=row.number,
                state=row.state,
                source_status=meta.get("source_status"),
                date=_date(meta.get("date")) or decided,
                deciders=list(deciders),
                consulted=list(meta.get("consulted") or []),
                informed=list(meta.get("informed") or []),
                context=row.context,
                decision=row.decision,
                consequences=row.consequences,
                alternatives=list(row.alternatives or []),
                supersedes=[f"{older.number:04d}" for older in row.supersedes.all()],
                extra=json.loads(meta.get("extra") or "{}"),
            )
        )
    return docs


def madr_folder(project: Project) -> dict[str, bytes]:
    return madr.write(decision_docs(project))


def task_docs(project: Project) -> list[TaskDoc]:
    """Every task of the project as beads issues, in number order."""
    rows = list(
        Task.objects.filter(project=project)
        .prefetch_related(
            "labels",
            Prefetch("depends_on", queryset=Task.objects.only("key", "metadata", "origin")),
        )
        .order_by("number")
    )
    return [_task_doc(row) for row in rows]


def _beads_id(task: Task) -> str:
    meta = task.metadata or {}
    return meta["id"] if task.origin.startswith("beads:") and meta.get("id") else task.key


def _task_doc(row: Task) -> TaskDoc:
    meta = row.metadata if row.origin.startswith("beads:") else {}
    title, description, acceptance = row.title, row.description, ""
    if meta:
        if row.title == (meta.get("title") or "")[:200]:
            title = meta.get("title") or row.title  # the whole title, past our 200 characters
        derived = with_acceptance(meta.get("description") or "", meta.get("acceptance") or "")
        if row.description == derived:
            description, acceptance = meta.get("description") or "", meta.get("acceptance") or ""
    names = sorted(label.name for label in row.labels.all())
    given = list(meta.get("labels") or [])
    labels = given if sorted({label_name(n) for n in given}) == names else names
    state = EXPORTED_STATES.get(row.state, row.state)
    return TaskDoc(
        external_id=_beads_id(row),
        title=title,
        source=SOURCE,
        description=description,
        acceptance=acceptance,
        state=state,
        source_status=meta.get("source_status") if meta.get("state") == state else None,
        priority=row.priority,
        labels=labels,
        depends_on=[_beads_id(other) for other in row.depends_on.all()],
        created_at=_moment(meta.get("created_at")) or row.created_at,
        closed_at=_moment(meta.get("closed_at")),
        extra=json.loads(meta.get("extra") or "{}"),
    )


def _moment(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def speckit_spec(project: Project, spec_key: str | None) -> str:
    """The spec's current version (its latest when none is accepted) as a spec-kit spec.md."""
    if not spec_key:
        raise NotFound(f"name the spec to export: ?spec={project.slug}-S1")
    spec = Spec.objects.filter(project=project, key=spec_key).first()
    if spec is None:
        raise NotFound(f"no spec {spec_key} in {project.slug}")
    version = (
        spec.versions.filter(state=SpecVersionState.ACCEPTED).first()
        or spec.versions.order_by("-number").first()
    )
    doc = SpecDoc(
        external_id=spec.key,
        title=spec.title,
        body=version.body,
        criteria=[
            CriterionDoc(key=c.key, text=c.text, source=SOURCE, proof=c.proof)
            for c in version.criteria.all()
        ],
        source=SOURCE,
    )
    return speckit.write_spec(doc)
