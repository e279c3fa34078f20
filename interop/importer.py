"""Writing what a format read into a project, and saying what was done with each item.

Items are matched to rows by their ``origin`` (``<format>:<origin name>:<id>``,
``interop.origins``), so the same files uploaded again under the same name change nothing,
and another upload's items (another repository's ``docs/decisions/0013``) are never taken
for them. What is new is created; a spec whose file changed gets a new proposed
version (never accepted by an import); a task still waiting to be claimed takes the file's
changes; anything already in Factory Memory's hands (a claimed or finished task, a decided
decision) is left as it is, and the report says so. Tasks and decisions are written in bulk,
so a large file costs a constant number of queries per item.

Imported rows start in the state the file gives them (a beads issue closed there is done
here, without evidence; an accepted ADR is accepted): no transition happened here, so none is
recorded; the import's own Event says who brought them in.
"""

import json
import re
from collections import Counter
from datetime import UTC, datetime, time

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F
from django.db.models.functions import Greatest

from decisions import services as decision_services
from decisions.models import Decision, DecisionState, Spec, SpecAmendment, SpecVersionState
from interop import origins
from interop.documents import DecisionDoc, Parsed, Source, SpecDoc, TaskDoc, break_cycles
from projects.models import Project
from tasks.models import Label, Task, TaskState

EDITABLE_TASK_STATES = {TaskState.DRAFT, TaskState.READY, TaskState.BLOCKED}
LABEL = re.compile(r"[^a-z0-9._:/-]+")
TITLE_MAX = 200


class Report:
    """What an import did (or, rolled back, would do) with each item, with file and line."""

    def __init__(self, format: str):
        self.format = format
        self.items: list[dict] = []
        self.skipped: list[dict] = []
        self.notices: list[dict] = []

    def item(self, kind: str, origin: str, key: str, action: str, source: Source, note=""):
        entry = {
            "kind": kind,
            "origin": origin,
            "key": key,
            "action": action,
            "source": str(source),
        }
        if note:
            entry["note"] = note
        self.items.append(entry)

    def skip(self, source: Source, reason: str) -> None:
        self.skipped.append({"source": str(source), "reason": reason})

    def notice(self, source: Source, message: str) -> None:
        self.notices.append({"source": str(source), "message": message})

    def as_dict(self) -> dict:
        counts = {"created": 0, "updated": 0, "unchanged": 0, "skipped": len(self.skipped)}
        for entry in self.items:
            counts[entry["action"]] = counts.get(entry["action"], 0) + 1
        return {
            "format": self.format,
            "counts": counts,
            "items": self.items,
            "skipped": self.skipped,
            "notices": self.notices,
        }


def write(*, project: Project, actor, format: str, origin_name: str, parsed: Parsed) -> dict:
    """Write ``parsed`` into ``project`` in the caller's transaction; return the report.
    Its rows' origins are ``<format>:<origin_name>:<id>``."""
    writer = _Writer(project, actor, format, origin_name)
    # A file may say A depends on B and B on A (spec-kit's explicit Depends lines can): such
    # tasks could never be claimed, so the edge that closes a cycle is dropped and noted.
    break_cycles(parsed.tasks, parsed)
    for skip in parsed.skips:
        writer.report.skip(skip.source, skip.reason)
    for notice in parsed.notices:
        writer.report.notice(notice.source, notice.message)
    writer.specs(parsed.specs)
    writer.decisions(parsed.decisions)
    writer.tasks(parsed.tasks)
    writer.namesakes()
    return writer.report.as_dict()


def label_name(name: str) -> str:
    """A label as our labels are written: lower case, letters, digits and . _ : / -."""
    return LABEL.sub("-", name.strip().lower()).strip("-._:/")[:50]


def _criteria(doc: SpecDoc) -> list[dict]:
    return [{"key": c.key, "text": c.text, "proof": c.proof} for c in doc.criteria]


def _stamp(value) -> str | None:
    return value.isoformat() if value is not None else None


class _Writer:
    def __init__(self, project: Project, actor, format: str, origin_name: str):
        self.project = Project.objects.get(pk=project.pk)
        self.actor = actor
        self.format = format
        self.origin_name = origin_name
        self.report = Report(format)
        self.specs_by_id: dict[str, Spec] = {}
        self.decisions_by_id: dict[str, Decision] = {}

    def origin(self, external_id: str) -> str:
        return origins.origin(self.format, self.origin_name, external_id)

    def _fits(self, source: Source, metadata: dict) -> bool:
        """Whether a record's metadata is within ``FACTORY_IMPORT_MAX_METADATA_BYTES``; a
        record past it is skipped, so no one file's leftovers make every read of it slow."""
        size = len(json.dumps(metadata, ensure_ascii=False).encode())
        limit = settings.FACTORY_IMPORT_MAX_METADATA_BYTES
        if size > limit:
            self.report.skip(source, f"its metadata is {size} bytes; the limit is {limit}")
        return size <= limit

    def namesakes(self) -> None:
        """One notice when records this upload creates have the ids of records another origin
        name brought in. Another repository's files are rightly kept apart; the same files
        uploaded under another name (a renamed archive, a folder zipped by another name) are
        taken twice, and the notice says which name would have matched them."""
        prefix = self.origin("")
        created = {
            entry["origin"][len(prefix) :]: entry["source"]
            for entry in self.report.items
            if entry["action"] == "created"
        }
        if not created:
            return
        named = re.compile(rf"{re.escape(self.format)}:([A-Za-z0-9][A-Za-z0-9._-]*):(.*)", re.S)
        shared: Counter[str] = Counter()
        where = None
        for model in (Spec, Decision, Task):
            # The project's other uploads of this format: constant queries, whatever the file.
            others = (
                model.objects.filter(project=self.project, origin__startswith=f"{self.format}:")
                .exclude(origin__startswith=prefix)
                .values_list("origin", flat=True)
            )
            for origin in others.iterator():
                match = named.fullmatch(origin)
                if match and match[2] in created:
                    shared[match[1]] += 1
                    where = where or created[match[2]]
        if shared:
            names = ", ".join(f"{name} ({count})" for name, count in sorted(shared.items()))
            self.report.notice(
                where,
                f"{shared.total()} of the records created have the ids of records imported"
                f" under another origin name: {names}. Files from another repository are"
                " rightly kept apart; the same files again are taken twice unless uploaded"
                " under the name they had (origin_name).",
            )

    # --- Specs: few, each through the spec services and their rules -----------------------

    def specs(self, docs: list[SpecDoc]) -> None:
        stored = {
            spec.origin: spec
            for spec in Spec.objects.filter(
                project=self.project, origin__in=[self.origin(d.external_id) for d in docs]
            )
        }
        for doc in docs:
            try:
                with transaction.atomic():  # a refused spec leaves nothing half written
                    self._spec(doc, stored.get(self.origin(doc.external_id)))
            except ValidationError as exc:
                self.report.skip(doc.source, "; ".join(exc.messages))

    def _spec(self, doc: SpecDoc, spec: Spec | None) -> None:
        origin, criteria = self.origin(doc.external_id), _criteria(doc)
        title = (doc.title or doc.external_id)[:TITLE_MAX]
        if spec is None:
            spec = decision_services.spec_create(
                project=self.project,
                actor=self.actor,
                title=title,
                body=doc.body,
                criteria=criteria,
            )
            Spec.objects.filter(pk=spec.pk).update(origin=origin)
            version = spec.versions.get()
            if doc.open_questions:
                for where, question in doc.open_questions:
                    self.report.notice(where, f"needs clarification: {question}")
                note = f"v1 kept proposed: {len(doc.open_questions)} open question(s)"
            else:
                decision_services.spec_version_accept(
                    version=version, actor=self.actor, reason=f"imported from {origin}"
                )
                note = "v1 accepted"
            self.report.item("spec", origin, spec.key, "created", doc.source, note)
        else:
            latest = spec.versions.order_by("-number").first()
            same = (
                latest is not None
                and latest.body == doc.body
                and [
                    {"key": c.key, "text": c.text, "proof": c.proof} for c in latest.criteria.all()
                ]
                == criteria
            )
            if same:
                self.report.item("spec", origin, spec.key, "unchanged", doc.source)
            else:
                version = decision_services.spec_version_create(
                    spec=spec, actor=self.actor, body=doc.body, criteria=criteria
                )
                note = f"v{version.number} proposed: the file changed; accept it to make it current"
                self.report.item("spec", origin, spec.key, "updated", doc.source, note)
        self.specs_by_id[doc.external_id] = spec

    # --- Decisions: in bulk, numbers kept where they are free -------------------------------

    def decisions(self, docs: list[DecisionDoc]) -> None:
        if not docs:
            return
        stored = {
            d.origin: d
            for d in Decision.objects.filter(
                project=self.project, origin__in=[self.origin(d.external_id) for d in docs]
            )
        }
        taken = set(Decision.objects.filter(project=self.project).values_list("number", flat=True))
        new: list[tuple[DecisionDoc, Decision]] = []
        for doc in docs:
            if not self._fits(doc.source, _decision_metadata(doc)):
                continue
            origin = self.origin(doc.external_id)
            row = stored.get(origin)
            if row is not None:
                self.decisions_by_id[doc.external_id] = row
                self._compare_decision(doc, row)
                continue
            row = self._decision_row(doc, origin)
            if doc.number and doc.number not in taken:
                row.number = doc.number
                taken.add(doc.number)
            new.append((doc, row))
        top = max(taken | {0})
        # Unnumbered (or clashing) records follow the highest number in use.
        for _, row in new:
            if not row.number:
                top += 1
                row.number = top
                taken.add(top)
            row.key = self.project.key_for("decision", row.number)
        if new:
            highest = max(row.number for _, row in new)
            Project.objects.filter(pk=self.project.pk).update(
                decision_seq=Greatest(F("decision_seq"), highest)
            )
            Decision.objects.bulk_create([row for _, row in new])
        for doc, row in new:
            self.decisions_by_id[doc.external_id] = row
            note = ""
            if doc.number is not None and row.number != doc.number:
                note = (
                    f"numbered {row.number}: {doc.number} was taken"
                    if doc.number
                    else f"numbered {row.number}: numbers here start at 1"
                )
            self.report.item("decision", row.origin, row.key, "created", doc.source, note)
        self._link_decisions([(doc, row) for doc, row in new])

    def _decision_row(self, doc: DecisionDoc, origin: str) -> Decision:
        decided = (
            datetime.combine(doc.date, time(), tzinfo=UTC)
            if doc.date and doc.state != DecisionState.PROPOSED
            else None
        )
        if len(doc.title) > TITLE_MAX:
            self.report.notice(doc.source, f"title cut to {TITLE_MAX} characters")
        return Decision(
            project=self.project,
            number=0,
            key="",
            title=(doc.title or doc.external_id)[:TITLE_MAX],
            context=doc.context,
            decision=doc.decision,
            consequences=doc.consequences,
            alternatives=doc.alternatives,
            state=doc.state,
            proposed_by=self.actor,
            decided_at=decided,
            verdict_reason=f"imported from {origin}" if decided else "",
            origin=origin,
            metadata=_decision_metadata(doc),
        )

    def _compare_decision(self, doc: DecisionDoc, row: Decision) -> None:
        fields = self._decision_row(doc, row.origin)
        differs = [
            name
            for name in ("title", "context", "decision", "consequences", "alternatives", "state")
            if getattr(row, name) != getattr(fields, name)
        ]
        if not differs:
            self.report.item("decision", row.origin, row.key, "unchanged", doc.source)
        else:
            # A decided record's text never changes; a proposed one is decided here, not in the file.
            self.report.skip(
                doc.source,
                f"{row.key} ({row.state}) differs from the file in {', '.join(differs)}; "
                "Factory Memory keeps its record (if the file is another log's, upload it"
                f" under an origin name of its own, not {self.origin_name})",
            )

    def _link_decisions(self, new: list[tuple[DecisionDoc, Decision]]) -> None:
        supersedes, specs, amendments = [], [], []
        for doc, row in new:
            for predecessor in doc.supersedes:
                older = self.decisions_by_id.get(predecessor) or self._decision_by_origin(
                    predecessor
                )
                if older is None:
                    self.report.notice(doc.source, f"supersedes {predecessor}, which is not here")
                else:
                    supersedes.append(
                        Decision.supersedes.through(
                            from_decision_id=row.pk, to_decision_id=older.pk
                        )
                    )
            for amended in doc.amends:
                spec = self.specs_by_id.get(amended.external_id)
                if spec is None:
                    self.report.notice(
                        doc.source, f"amends {amended.external_id}, a spec not imported: left out"
                    )
                    continue
                specs.append(Decision.specs.through(decision_id=row.pk, spec_id=spec.pk))
                if row.state == DecisionState.PROPOSED:
                    base = spec.versions.filter(state=SpecVersionState.ACCEPTED).first()
                    amendments.append(
                        SpecAmendment(
                            decision=row,
                            spec=spec,
                            base_version=base,
                            body=amended.body,
                            criteria=_criteria(amended),
                        )
                    )
        Decision.supersedes.through.objects.bulk_create(supersedes)
        Decision.specs.through.objects.bulk_create(specs)
        SpecAmendment.objects.bulk_create(amendments)

    def _decision_by_origin(self, external_id: str) -> Decision | None:
        return Decision.objects.filter(
            project=self.project, origin=self.origin(external_id)
        ).first()

    # --- Tasks: in bulk ----------------------------------------------------------------------

    def tasks(self, docs: list[TaskDoc]) -> None:
        if not docs:
            return
        origins = [self.origin(d.external_id) for d in docs]
        stored = {
            t.origin: t
            for t in Task.objects.filter(project=self.project, origin__in=origins).prefetch_related(
                "labels", "depends_on"
            )
        }
        labels = self._labels(docs)
        new, changed = [], []
        for doc in docs:
            origin = self.origin(doc.external_id)
            row = stored.get(origin)
            fields = self._task_fields(doc)
            if not self._fits(doc.source, fields["metadata"]):
                continue
            if row is None:
                new.append((doc, Task(project=self.project, origin=origin, **fields)))
            elif self._task_same(row, doc, fields, labels):
                self.report.item("task", origin, row.key, "unchanged", doc.source)
            elif row.state not in EDITABLE_TASK_STATES:
                self.report.skip(
                    doc.source, f"{row.key} is {row.state} here; the file's changes are not applied"
                )
            else:
                for name in ("title", "description", "priority", "metadata"):
                    setattr(row, name, fields[name])
                if fields["state"] != row.state:
                    # States move here through their transitions, never by a file.
                    self.report.notice(
                        doc.source, f"{row.key} stays {row.state} here; the file says {doc.state}"
                    )
                changed.append((doc, row))
        self._create_tasks(new)
        Task.objects.bulk_update(
            [row for _, row in changed], ["title", "description", "priority", "metadata"]
        )
        by_id = {doc.external_id: row for doc, row in [*new, *changed]}
        by_id |= {
            doc.external_id: stored[self.origin(doc.external_id)]
            for doc in docs
            if self.origin(doc.external_id) in stored and doc.external_id not in by_id
        }
        self._link_tasks([*new, *changed], by_id, labels)
        for doc, row in new:
            self.report.item("task", row.origin, row.key, "created", doc.source)
        for doc, row in changed:
            self.report.item("task", row.origin, row.key, "updated", doc.source)

    def _task_fields(self, doc: TaskDoc) -> dict:
        if len(doc.title) > TITLE_MAX:
            self.report.notice(doc.source, f"title cut to {TITLE_MAX} characters")
        spec = self.specs_by_id.get(doc.spec) if doc.spec else None
        return {
            "title": (doc.title or doc.external_id)[:TITLE_MAX],
            "description": with_acceptance(doc.description, doc.acceptance),
            "priority": doc.priority,
            "spec": spec,
            "state": doc.state,
            "max_attempts": self.project.max_attempts,
            "created_by": self.actor,
            "metadata": _task_metadata(doc, self.format),
        }

    def _task_same(self, row: Task, doc: TaskDoc, fields: dict, labels: dict) -> bool:
        wanted = {labels[name].pk for name in doc.labels if name in labels}
        return (
            all(getattr(row, name) == fields[name] for name in ("title", "description", "priority"))
            and row.metadata == fields["metadata"]
            and {label.pk for label in row.labels.all()} == wanted
            and sorted(t.origin for t in row.depends_on.all())
            == sorted(self.origin(d) for d in doc.depends_on)
        )

    def _labels(self, docs: list[TaskDoc]) -> dict[str, Label]:
        """Each label a file names, by the name it wrote, as a Label of the project."""
        names = {}
        for doc in docs:
            for name in doc.labels:
                clean = label_name(name)
                if not clean:
                    self.report.notice(doc.source, f"label {name!r} has no letters we keep")
                    continue
                if clean != name:
                    self.report.notice(doc.source, f"label {name!r} imported as {clean!r}")
                names[name] = clean
        existing = {
            label.name: label
            for label in Label.objects.filter(project=self.project, name__in=set(names.values()))
        }
        missing = sorted(set(names.values()) - set(existing))
        Label.objects.bulk_create([Label(project=self.project, name=n) for n in missing])
        existing |= {
            label.name: label
            for label in Label.objects.filter(project=self.project, name__in=missing)
        }
        return {name: existing[clean] for name, clean in names.items()}

    def _create_tasks(self, new: list[tuple[TaskDoc, Task]]) -> None:
        if not new:
            return
        for number, (_, row) in zip(self.project.next_numbers("task", len(new)), new, strict=True):
            row.number, row.key = number, self.project.key_for("task", number)
        Task.objects.bulk_create([row for _, row in new])

    def _link_tasks(self, rows: list[tuple[TaskDoc, Task]], by_id: dict, labels: dict) -> None:
        ids = [row.pk for _, row in rows]
        Task.labels.through.objects.filter(task_id__in=ids).delete()
        Task.depends_on.through.objects.filter(from_task_id__in=ids).delete()
        label_rows, dependency_rows, decision_rows = [], [], []
        for doc, row in rows:
            for label_id in {labels[name].pk for name in doc.labels if name in labels}:
                label_rows.append(Task.labels.through(task_id=row.pk, label_id=label_id))
            for target in doc.depends_on:
                other = by_id.get(target)
                if other is None:
                    self.report.notice(doc.source, f"depends on {target}, which is not here")
                else:
                    dependency_rows.append(
                        Task.depends_on.through(from_task_id=row.pk, to_task_id=other.pk)
                    )
            decision = self.decisions_by_id.get(doc.decision) if doc.decision else None
            if decision is not None:
                decision_rows.append(
                    Decision.tasks.through(decision_id=decision.pk, task_id=row.pk)
                )
        Task.labels.through.objects.bulk_create(label_rows)
        Task.depends_on.through.objects.bulk_create(dependency_rows)
        Decision.tasks.through.objects.bulk_create(decision_rows, ignore_conflicts=True)


def with_acceptance(description: str, acceptance: str) -> str:
    """A task's description with the file's acceptance criteria under a heading of their own,
    so an agent reads them; ``interop.exporter`` recognises it and gives the two back apart."""
    if not acceptance:
        return description
    return f"{description}\n\n## Acceptance\n\n{acceptance}".strip()


def kept(extra: dict) -> str:
    """``extra`` as JSON text. PostgreSQL's jsonb reorders object keys, and an export must give
    a file's keys back in the file's order (bd's own file comes back byte for byte)."""
    return json.dumps(extra, ensure_ascii=False)


def _task_metadata(doc: TaskDoc, format: str) -> dict:
    """What an export needs to give the item back as the file had it."""
    return {
        "format": format,
        "id": doc.external_id,
        "title": doc.title,
        "description": doc.description,
        "acceptance": doc.acceptance,
        "state": doc.state,
        "source_status": doc.source_status,
        "priority": doc.priority,
        "labels": list(doc.labels),
        "created_at": _stamp(doc.created_at),
        "closed_at": _stamp(doc.closed_at),
        "extra": kept(doc.extra),
    }


def _decision_metadata(doc: DecisionDoc) -> dict:
    return {
        "id": doc.external_id,
        "number": doc.number,
        "source_status": doc.source_status,
        "date": _stamp(doc.date),
        "deciders": doc.deciders,
        "consulted": doc.consulted,
        "informed": doc.informed,
        "extra": kept(doc.extra),
    }
