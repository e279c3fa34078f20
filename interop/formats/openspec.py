"""OpenSpec (Fission-AI/OpenSpec) trees: `openspec/specs/` and `openspec/changes/`.

An `openspec/` folder may sit at the root or under any prefix; each one is read on its own.

- `openspec/specs/<capability>/spec.md` → a SpecDoc whose external id is the capability folder
  (`a/b` when nested) and whose title is the file's H1 as written (the capability when none).
  Each `### Requirement: Name` block is a criterion. Its key is the name as a slug (`Path
  configuration for supported tools` → `path-configuration-for-supported-tools`, letters of any
  script kept); a slug over 32 characters is cut to 25 and given `-` and six hex digits of the
  name's SHA-1, so keys stay stable while the name does. Its text is the name, a blank line and
  the block's Markdown as written (statement, `#### Scenario:` headings and their WHEN/THEN
  bullets, wrapped lines and all). A requirement that says neither SHALL nor MUST still imports,
  with a Notice; a second requirement with the same key is a Skip.
- `openspec/changes/<id>/` → a proposed DecisionDoc: title from proposal.md's H1 (`Change:`
  dropped) or the id; context, decision and consequences from `## Why`, `## What Changes` and
  `## Impact`; other `##` sections in `extra["sections"]`; design.md verbatim in
  `extra["design"]`; `.openspec.yaml` verbatim in `extra["metadata"]` and its `created:` as
  the date. Each delta `specs/<capability>/spec.md`
  is applied to the current spec the way `openspec archive` does (RENAMED, then REMOVED, then
  MODIFIED, then ADDED; repeated sections are all read) and the result, body and criteria as
  they would read, goes in `amends`. A delta on a capability with no current spec creates it
  from its ADDED requirements. RENAMED, REMOVED or MODIFIED naming a requirement that is not
  there, and ADDED naming one that is (with other content), are Skips with the delta's file
  and line; a MODIFIED block that drops scenarios the current one has gets a Notice.
- its `tasks.md` → TaskDocs with `decision` = the change id: every top-level checklist item
  (`- [ ] 1.1 …`; nested items stay in the parent's description) is a task with external id
  `<change-id>/1.1`. An item with no number gets `<group>.<position>`, the group being the
  number its `##` heading gives or else its position. `[x]` is done, with a Notice that it is
  done without evidence. Every task of a group depends on every task of the group before it:
  the groups are the order the author wrote the work in, and that is all the file says.
- `openspec/changes/archive/YYYY-MM-DD-<id>/` → an accepted DecisionDoc with that date and
  external id `<id>` (a folder without a date keeps its name as the id, with a Notice). Its
  deltas are already in the current specs, so they are not applied again; the capabilities it
  touched are listed in `extra["touched"]`. Its tasks are history, not open work: they are not
  imported, their counts go in `extra["tasks"]`, and unchecked ones get a Notice.

Nothing is exported to OpenSpec.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date

from interop.documents import (
    CriterionDoc,
    DecisionDoc,
    Notice,
    Parsed,
    Skip,
    Source,
    SpecDoc,
    TaskDoc,
)
from interop.formats.markdown import (
    CHECKBOX,
    Document,
    Heading,
    chain_groups,
    item_continuation,
    join_block,
    read,
    short_title,
)

SPEC_FILE = re.compile(r"^(?P<root>(?:.*/)?)openspec/specs/(?P<cap>[^/].*?)/spec\.md$")
CHANGE_FILE = re.compile(r"^(?P<root>(?:.*/)?)openspec/changes/(?P<rest>.+)$")
DELTA_FILE = re.compile(r"^specs/(?P<cap>.+)/spec\.md$")
ARCHIVED = re.compile(r"^(?P<date>\d{4}-\d{2}-\d{2})-(?P<id>.+)$")
REQUIREMENT = re.compile(r"^###\s*Requirement:\s*(?P<name>.+?)\s*$", re.IGNORECASE)
DELTA_SECTION = re.compile(r"^(?P<op>ADDED|MODIFIED|REMOVED|RENAMED)\s+Requirements\s*$", re.I)
RENAME = re.compile(
    r"^\s*-?\s*(?P<side>FROM|TO):\s*`?###\s*Requirement:\s*(?P<name>.+?)`?\s*$", re.I
)
REMOVED_ITEM = re.compile(r"^\s*-\s*`?###\s*Requirement:\s*(?P<name>.+?)`?\s*$", re.IGNORECASE)
SCENARIO = re.compile(r"^####\s*Scenario:\s*(?P<name>.+?)\s*$", re.IGNORECASE)
REQUIREMENTS_HEADING = re.compile(r"^##\s+Requirements\s*$", re.IGNORECASE)
BLOCK_END = re.compile(r"^ {0,3}#{1,3}(?:[ \t]|$)")
TOP_HEADING = re.compile(r"^#{1,2}\s")
NORMATIVE = re.compile(r"\b(?:SHALL|MUST)\b")
CHANGE_PREFIX = re.compile(r"^(?:Change|Proposal)\s*:\s*", re.IGNORECASE)
CREATED = re.compile(r"^created:\s*['\"]?(?P<date>\d{4}-\d{2}-\d{2})", re.MULTILINE)
TASK_NUMBER = re.compile(r"^(?P<n>\d+(?:\.\d+)+)\.?\s+(?P<title>.*)$")
GROUP_NUMBER = re.compile(r"^(?P<n>\d+)[.)]?\s")
KEY_LENGTH = 32
SECTION_FIELDS = {
    "why": "context",
    "context": "context",
    "motivation": "context",
    "what changes": "decision",
    "changes": "decision",
    "impact": "consequences",
    "consequences": "consequences",
}
MARK_STATES = {" ": "ready", "x": "done", "X": "done", "~": "cancelled", "-": "cancelled"}


def parse(files: Mapping[str, bytes]) -> Parsed:
    """Read every `openspec/` tree among `files` (POSIX path → bytes).

    Never raises for file content: unreadable pieces become Skips, guesses become Notices.
    """
    parsed = Parsed()
    for _, tree in sorted(_trees(files).items()):
        _Reader(files, tree, parsed).read()
    return parsed


@dataclass
class _Tree:
    specs: dict[str, str] = field(default_factory=dict)
    changes: dict[str, dict[str, str]] = field(default_factory=dict)
    archived: dict[str, dict[str, str]] = field(default_factory=dict)


def _trees(files: Mapping[str, bytes]) -> dict[str, _Tree]:
    trees: dict[str, _Tree] = {}
    for path in files:
        if spec := SPEC_FILE.match(path):
            trees.setdefault(spec.group("root"), _Tree()).specs[spec.group("cap")] = path
        elif change := CHANGE_FILE.match(path):
            tree = trees.setdefault(change.group("root"), _Tree())
            parts = change.group("rest").split("/")
            archived = parts[0] == "archive"
            parts = parts[1:] if archived else parts
            if len(parts) < 2:
                continue
            folders = tree.archived if archived else tree.changes
            folders.setdefault(parts[0], {})["/".join(parts[1:])] = path
    return trees


# --- requirement blocks -------------------------------------------------------------------


@dataclass
class _Block:
    """A `### Requirement:` block: its lines (the header first) and where it was written."""

    name: str
    lines: list[str]
    source: Source

    def body(self) -> str:
        return join_block(self.lines[1:])

    def scenarios(self) -> list[str]:
        return [m.group("name") for line in self.lines if (m := SCENARIO.match(line))]


@dataclass
class _Spec:
    """A capability spec as text lines and requirement blocks, in file order."""

    cap: str
    title: str | None
    parts: list[str | _Block]

    def find(self, name: str) -> int | None:
        return next(
            (
                i
                for i, part in enumerate(self.parts)
                if isinstance(part, _Block) and part.name == name
            ),
            None,
        )

    def blocks(self) -> list[_Block]:
        return [part for part in self.parts if isinstance(part, _Block)]

    def render(self) -> str:
        """The spec as Markdown: its lines as written, each block followed by one blank line."""
        out: list[str] = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            if out and out[-1].strip():
                out.append("")
            out += [*_trim(part.lines), ""]
        return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip("\n") + "\n"


def _trim(lines: list[str]) -> list[str]:
    end = len(lines)
    while end > 1 and not lines[end - 1].strip():
        end -= 1
    return lines[:end]


def _split(doc: Document, start: int, end: int) -> list[str | _Block]:
    """Lines `start`..`end` of `doc` with each requirement block gathered into a `_Block`.

    A block runs from its header to the next heading of level three or above outside code.
    """
    parts: list[str | _Block] = []
    index = start
    while index < end:
        match = None if doc.fenced[index] else REQUIREMENT.match(doc.lines[index])
        if match is None:
            parts.append(doc.lines[index])
            index += 1
            continue
        stop = index + 1
        while stop < end and (doc.fenced[stop] or not _ends_block(doc.lines[stop])):
            stop += 1
        parts.append(_Block(match.group("name"), doc.lines[index:stop], doc.source(index)))
        index = stop
    return parts


def _ends_block(line: str) -> bool:
    return BLOCK_END.match(line) is not None


def requirement_key(name: str) -> str:
    """The criterion key for a requirement name: its slug, at most 32 characters."""
    slug = re.sub(r"[\W_]+", "-", name.casefold()).strip("-") or "requirement"
    if len(slug) <= KEY_LENGTH:
        return slug
    digest = hashlib.sha1(name.strip().encode()).hexdigest()[:6]
    return f"{slug[:25].rstrip('-')}-{digest}"


def _spec_doc(
    spec: _Spec, source: Source, body: str, parsed: Parsed, *, only: str | None = None
) -> SpecDoc:
    """The SpecDoc for `spec`; with `only`, problems are reported for blocks from that file only
    (an amended spec's other blocks were reported with the current spec)."""
    criteria: list[CriterionDoc] = []
    first: dict[str, _Block] = {}
    for block in spec.blocks():
        key = requirement_key(block.name)
        report = only is None or block.source.path == only
        if key in first:
            line = first[key].source.line
            reason = f"duplicate requirement {block.name!r} (key {key}, first at line {line})"
            if report:
                parsed.skips.append(Skip(block.source, reason))
            continue
        first[key] = block
        if report and not NORMATIVE.search(block.body()):
            parsed.notices.append(
                Notice(block.source, f"requirement {block.name!r} says neither SHALL nor MUST")
            )
        criteria.append(CriterionDoc(key, join_block([block.name, "", block.body()]), block.source))
    return SpecDoc(
        external_id=spec.cap,
        title=spec.title or spec.cap,
        body=body,
        criteria=criteria,
        source=source,
    )


# --- deltas -------------------------------------------------------------------------------


@dataclass
class _Delta:
    """One change's delta for one capability."""

    cap: str
    path: str
    added: list[_Block] = field(default_factory=list)
    modified: list[_Block] = field(default_factory=list)
    removed: list[tuple[str, Source]] = field(default_factory=list)
    renamed: list[tuple[str, str, Source]] = field(default_factory=list)
    purpose: str = ""


def _read_delta(doc: Document, cap: str, parsed: Parsed) -> _Delta:
    delta = _Delta(cap, doc.path)
    found = False
    for heading in doc.headings:
        end = doc.section_end(heading)
        if heading.level == 2 and heading.text.lower() == "purpose":
            delta.purpose = doc.section_text(heading)
        match = DELTA_SECTION.match(heading.text) if heading.level == 2 else None
        if match is None:
            continue
        found = True
        op = match.group("op").upper()
        if op in ("ADDED", "MODIFIED"):
            blocks = [p for p in _split(doc, heading.index + 1, end) if isinstance(p, _Block)]
            (delta.added if op == "ADDED" else delta.modified).extend(blocks)
        elif op == "REMOVED":
            delta.removed += _removed_names(doc, heading.index + 1, end)
        else:
            delta.renamed += _renames(doc, heading.index + 1, end, parsed)
    if not found:
        parsed.notices.append(
            Notice(doc.source(), "no ADDED, MODIFIED, REMOVED or RENAMED Requirements section")
        )
    return delta


def _removed_names(doc: Document, start: int, end: int) -> list[tuple[str, Source]]:
    names = []
    for index in range(start, end):
        match = None if doc.fenced[index] else REQUIREMENT.match(doc.lines[index])
        match = match or (None if doc.fenced[index] else REMOVED_ITEM.match(doc.lines[index]))
        if match:
            names.append((match.group("name"), doc.source(index)))
    return names


def _renames(doc: Document, start: int, end: int, parsed: Parsed) -> list[tuple[str, str, Source]]:
    pairs = []
    pending: tuple[str, Source] | None = None
    for index in range(start, end):
        match = None if doc.fenced[index] else RENAME.match(doc.lines[index])
        if match is None:
            continue
        if match.group("side").upper() == "FROM":
            pending = (match.group("name"), doc.source(index))
        elif pending is None:
            parsed.skips.append(Skip(doc.source(index), "RENAMED TO without a FROM before it"))
        else:
            pairs.append((pending[0], match.group("name"), pending[1]))
            pending = None
    if pending is not None:
        parsed.skips.append(Skip(pending[1], f"RENAMED FROM {pending[0]!r} without a TO"))
    return pairs


def _apply(base: _Spec | None, delta: _Delta, change: str, parsed: Parsed) -> _Spec | None:
    """The spec as it reads with `delta` applied, or None when nothing could be applied."""
    if base is None:
        return _create(delta, change, parsed)
    spec = _Spec(base.cap, base.title, list(base.parts))
    for old, new, source in delta.renamed:
        _rename(spec, old, new, source, parsed)
    for name, source in delta.removed:
        position = _locate(spec, name, "REMOVED", source, parsed)
        if position is not None:
            del spec.parts[position]
    for block in delta.modified:
        position = _locate(spec, block.name, "MODIFIED", block.source, parsed)
        if position is not None:
            _report_dropped(spec.parts[position], block, parsed)
            spec.parts[position] = block
    for block in delta.added:
        _add(spec, block, parsed)
    return spec


def _create(delta: _Delta, change: str, parsed: Parsed) -> _Spec | None:
    """A new capability from a delta: its ADDED requirements under a skeleton like archive's."""
    why = f"{delta.cap} has no current spec; only ADDED requirements can create it"
    for name, source in [
        *((old, source) for old, _, source in delta.renamed),
        *delta.removed,
        *((block.name, block.source) for block in delta.modified),
    ]:
        parsed.skips.append(Skip(source, f"{name!r}: {why}"))
    if not delta.added:
        return None
    purpose = delta.purpose or f"TBD - created by change {change}."
    head = [f"# {delta.cap} Specification", "", "## Purpose", purpose, "", "## Requirements", ""]
    spec = _Spec(delta.cap, None, list(head))
    for block in delta.added:
        _add(spec, block, parsed)
    return spec


def _rename(spec: _Spec, old: str, new: str, source: Source, parsed: Parsed) -> None:
    position = _locate(spec, old, "RENAMED", source, parsed)
    if position is None:
        return
    if spec.find(new) is not None:
        parsed.skips.append(Skip(source, f"RENAMED {old!r} to {new!r}, which already exists"))
        return
    block = spec.parts[position]
    assert isinstance(block, _Block)
    spec.parts[position] = _Block(new, [f"### Requirement: {new}", *block.lines[1:]], block.source)


def _locate(spec: _Spec, name: str, op: str, source: Source, parsed: Parsed) -> int | None:
    position = spec.find(name)
    if position is None:
        near = next((b.name for b in spec.blocks() if b.name.casefold() == name.casefold()), None)
        hint = f" (it has {near!r})" if near else ""
        parsed.skips.append(
            Skip(source, f"{op} {name!r}: {spec.cap} has no such requirement{hint}")
        )
    return position


def _report_dropped(current: str | _Block, block: _Block, parsed: Parsed) -> None:
    assert isinstance(current, _Block)
    dropped = [name for name in current.scenarios() if name not in block.scenarios()]
    if dropped:
        parsed.notices.append(
            Notice(block.source, f"MODIFIED {block.name!r} drops scenarios {dropped} the spec has")
        )


def _add(spec: _Spec, block: _Block, parsed: Parsed) -> None:
    position = spec.find(block.name)
    if position is not None:
        same = spec.parts[position]
        if not (isinstance(same, _Block) and same.body() == block.body()):
            parsed.skips.append(
                Skip(block.source, f"ADDED {block.name!r}, which {spec.cap} already has")
            )
        return
    spec.parts.insert(_insertion_point(spec), block)


def _insertion_point(spec: _Spec) -> int:
    """After the last requirement; else at the end of `## Requirements`; else at the end."""
    last = max((i for i, part in enumerate(spec.parts) if isinstance(part, _Block)), default=None)
    if last is not None:
        return last + 1
    heading = next(
        (
            i
            for i, p in enumerate(spec.parts)
            if isinstance(p, str) and REQUIREMENTS_HEADING.match(p)
        ),
        None,
    )
    if heading is None:
        spec.parts += ["", "## Requirements", ""]
        return len(spec.parts)
    end = heading + 1
    while end < len(spec.parts) and not (
        isinstance(spec.parts[end], str) and TOP_HEADING.match(spec.parts[end])
    ):
        end += 1
    return end


# --- changes ------------------------------------------------------------------------------


class _Reader:
    """Reads one `openspec/` tree into `parsed`."""

    def __init__(self, files: Mapping[str, bytes], tree: _Tree, parsed: Parsed) -> None:
        self.files = files
        self.tree = tree
        self.parsed = parsed
        self.current: dict[str, _Spec] = {}
        self.decisions: dict[str, str] = {}

    def read(self) -> None:
        for cap, path in sorted(self.tree.specs.items()):
            self._read_spec(cap, path)
        for folder, members in sorted(self.tree.changes.items()):
            self._read_change(folder, members, archived=False)
        for folder, members in sorted(self.tree.archived.items()):
            self._read_change(folder, members, archived=True)

    def _doc(self, path: str | None) -> Document | None:
        if path is None:
            return None
        doc = read(path, self.files[path])
        if isinstance(doc, Skip):
            self.parsed.skips.append(doc)
            return None
        return doc

    def _read_spec(self, cap: str, path: str) -> None:
        doc = self._doc(path)
        if doc is None:
            return
        heading = doc.h1()
        if heading is None or not heading.text:
            self.parsed.notices.append(
                Notice(doc.source(), "no H1 title; the capability is the title")
            )
        title = short_title(heading.text)[0] if heading and heading.text else None
        spec = _Spec(cap, title, _split(doc, 0, len(doc.lines)))
        self.current[cap] = spec
        self.parsed.specs.append(_spec_doc(spec, doc.source(), doc.text, self.parsed))

    def _read_change(self, folder: str, members: dict[str, str], *, archived: bool) -> None:
        change, when = folder, None
        if archived and (dated := ARCHIVED.match(folder)):
            change, when = dated.group("id"), _date(dated.group("date"))
        first = members.get("proposal.md") or members[sorted(members)[0]]
        if change in self.decisions:
            reason = f"change {change} was already read from {self.decisions[change]}"
            self.parsed.skips.append(Skip(Source(first), reason))
            return
        self.decisions[change] = first.rsplit("/", 1)[0]
        if archived and when is None:
            self.parsed.notices.append(
                Notice(Source(first), f"archived change {folder} has no date")
            )
        decision = self._decision(change, members, first, when)
        decision.state = "accepted" if archived else "proposed"
        deltas = {
            m.group("cap"): path for rel, path in members.items() if (m := DELTA_FILE.match(rel))
        }
        if archived:
            decision.extra["touched"] = sorted(deltas)
            self._archived_tasks(decision, members.get("tasks.md"))
        else:
            decision.amends = [
                spec for cap in sorted(deltas) if (spec := self._amend(cap, deltas[cap], change))
            ]
            self._tasks(change, members.get("tasks.md"))
        self.parsed.decisions.append(decision)

    def _decision(
        self, change: str, members: dict[str, str], first: str, when: date | None
    ) -> DecisionDoc:
        decision = DecisionDoc(external_id=change, title=change, source=Source(first), date=when)
        design = self._doc(members.get("design.md"))
        if design is not None:
            decision.extra["design"] = design.text
        metadata = self._doc(members.get(".openspec.yaml"))
        if metadata is not None:
            decision.extra["metadata"] = metadata.text
            created = CREATED.search(metadata.text)
            decision.date = decision.date or (_date(created.group("date")) if created else None)
        proposal = self._doc(members.get("proposal.md"))
        if proposal is None:
            self.parsed.notices.append(
                Notice(Source(first), f"change {change} has no readable proposal.md")
            )
            return decision
        heading = proposal.h1()
        if heading is not None and heading.text:
            decision.title = short_title(CHANGE_PREFIX.sub("", heading.text) or change)[0]
        others = {}
        for section in (h for h in proposal.headings if h.level == 2):
            name = SECTION_FIELDS.get(section.text.strip().rstrip(":").lower())
            if name and not getattr(decision, name):
                setattr(decision, name, proposal.section_text(section))
            else:
                others[section.text] = proposal.section_text(section)
        if others:
            decision.extra["sections"] = others
        return decision

    def _amend(self, cap: str, path: str, change: str) -> SpecDoc | None:
        doc = self._doc(path)
        if doc is None:
            return None
        spec = _apply(
            self.current.get(cap), _read_delta(doc, cap, self.parsed), change, self.parsed
        )
        if spec is None:
            return None
        return _spec_doc(spec, doc.source(), spec.render(), self.parsed, only=doc.path)

    def _tasks(self, change: str, path: str | None) -> None:
        doc = self._doc(path)
        if doc is not None:
            self.parsed.tasks += _change_tasks(doc, change, self.parsed)

    def _archived_tasks(self, decision: DecisionDoc, path: str | None) -> None:
        doc = self._doc(path)
        if doc is None:
            return
        boxes = _top_items(doc)
        open_ = [i for i, m in boxes if m.group("mark") == " "]
        decision.extra["tasks"] = {"total": len(boxes), "done": len(boxes) - len(open_)}
        if open_:
            message = (
                f"archived change {decision.external_id} leaves {len(open_)} of {len(boxes)} "
                "tasks unchecked; archived tasks are not imported"
            )
            self.parsed.notices.append(Notice(doc.source(open_[0]), message))


def _date(text: str) -> date | None:
    try:
        return date.fromisoformat(text)
    except ValueError:
        return None


# --- tasks.md -----------------------------------------------------------------------------


def _top_items(doc: Document) -> list[tuple[int, re.Match]]:
    """Top-level checklist items (indented less than two spaces) outside code."""
    return [
        (index, match)
        for index in range(doc.body_start, len(doc.lines))
        if not doc.fenced[index]
        and (match := CHECKBOX.match(doc.lines[index]))
        and len(match.group("indent")) < 2
    ]


def _change_tasks(doc: Document, change: str, parsed: Parsed) -> list[TaskDoc]:
    groups: list[tuple[Heading | None, list[TaskDoc]]] = [(None, [])]
    seen: dict[str, int] = {}
    at = {h.index: h for h in doc.headings if h.level >= 2}
    items = dict(_top_items(doc))
    for index in range(doc.body_start, len(doc.lines)):
        if index in at:
            groups.append((at[index], []))
        elif index in items:
            heading, tasks = groups[-1]
            number = _group_number(heading, len(groups) - 1)
            task = _change_task(
                doc, index, items[index], change, f"{number}.{len(tasks) + 1}", parsed
            )
            key = task.extra["key"]
            if key in seen:
                parsed.skips.append(
                    Skip(task.source, f"task {key} again (first at line {seen[key]})")
                )
                continue
            seen[key] = task.source.line
            if heading is not None:
                task.extra["group"] = heading.text
            tasks.append(task)
    depends = chain_groups([[task.external_id for task in tasks] for _, tasks in groups])
    for _, tasks in groups:
        for task in tasks:
            task.depends_on = depends.get(task.external_id, [])
    return [task for _, tasks in groups for task in tasks]


def _group_number(heading: Heading | None, position: int) -> str:
    written = GROUP_NUMBER.match(heading.text) if heading else None
    return written.group("n") if written else str(position)


def _change_task(
    doc: Document, index: int, box: re.Match, change: str, fallback: str, parsed: Parsed
) -> TaskDoc:
    numbered = TASK_NUMBER.match(box.group("rest"))
    key = numbered.group("n") if numbered else fallback
    text = numbered.group("title") if numbered else box.group("rest")
    continuation, _ = item_continuation(doc, index, len(box.group("indent")))
    title, full = short_title(text.strip() or key)
    source = doc.source(index)
    mark = box.group("mark")
    state = MARK_STATES.get(mark, "ready")
    if state == "done":
        parsed.notices.append(Notice(source, f"task {key} is done without evidence"))
    elif mark != " ":
        parsed.notices.append(Notice(source, f"task {key} is marked [{mark}]; read as {state}"))
    return TaskDoc(
        external_id=f"{change}/{key}",
        title=title,
        source=source,
        description="\n\n".join(part for part in (full, join_block(continuation)) if part),
        state=state,
        source_status=f"[{mark}]",
        decision=change,
        extra={"key": key},
    )
