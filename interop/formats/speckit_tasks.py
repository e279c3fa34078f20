"""spec-kit `tasks.md`: one feature folder's tasks (`interop.formats.speckit` finds the folders).

tasks.md gives TaskDocs: checklist lines `- [ ] T001 [P] [US1] Description` (an id may be
bold, `**T001**`, and carry a letter, `T011A`) and headings `### T001: Title` / `### T001 [P] -
Title [P1]` with `**Depends**:` / `**Dependencies**:`, `**Status**:` and `**Acceptance…**:` fields.
A heading whose id already came from a checklist line adds its details to that task. Checklist
lines without a task id are not tasks; their count is reported once per file.

- external id `<feature>/T001`, with `T001` in `extra["key"]`, so ids stay unique across features;
- `[P]` becomes the label `parallel`, `[USn]` the label `usn`, a trailing `[P1]`..`[P3]` the
  priority 3..1 (`extra["priority"]` keeps it as written); other tags go to `extra["tags"]`;
- `[x]`/`[X]` is state done, with a Notice that it is done without evidence; `[~]` and `[-]`
  (deferred, dropped) are cancelled, with a Notice; a heading's `**Status**:` maps complete or
  done to done, blocked and cancelled to theirs, not started or pending to ready, and anything
  else to ready with a Notice;
- dependencies: an explicit `**Depends**:` field (`T001, T003-T005 (notes)`, `None`) or an
  inline `(depends on T028, T048)` is used as written. Otherwise every task of a phase
  (`## Phase N: …`) depends on every task of the phase before it, the exact meaning of phase
  order. That is |N|·|N+1| edges per pair of phases: the largest real file here (166 tasks in
  8 phases) makes 2,682, at most 24 per task. The linear alternatives either invent a gate
  task nobody wrote or claim an order inside a phase that the file does not state. Tasks
  outside any phase depend on nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from interop.documents import Notice, Parsed, Skip, Source, TaskDoc
from interop.formats.markdown import (
    CHECKBOX,
    SEPARATOR,
    Document,
    Heading,
    chain_groups,
    item_continuation,
    join_block,
    short_title,
)

TASK_ID = r"(?:\*\*)?(?P<id>T\d+[A-Za-z]?)(?:\*\*)?"
TASK_LINE = re.compile(rf"^{TASK_ID}(?![\w-])\s*:?\s*(?P<rest>.*)$")
TASK_HEADING = re.compile(rf"^{TASK_ID}(?![\w-])\s*(?P<rest>.*)$")
TAG = re.compile(r"^\[(?P<tag>[^\]]+)\]\s*")
PRIORITY_TAG = re.compile(r"\s*\[P(?P<n>[1-9])\]\s*$")
PHASE = re.compile(r"^Phase\s+\d+(?:\.\d+)*\b", re.IGNORECASE)
FIELD = re.compile(r"^\s*(?:[-*+]\s+)?\*\*(?P<name>[^*:]+?):?\*\*\s*:?\s*(?P<value>.*)$")
DEPENDS_FIELDS = {"depends", "depends on", "dependencies", "dependency", "blocked by"}
ACCEPTANCE_FIELDS = {
    "acceptance",
    "acceptance criteria",
    "success",
    "success criteria",
    "done when",
}
INLINE_DEPENDS = re.compile(r"\(\s*depends on:?\s+(?P<refs>T\d[^)]*)\)", re.IGNORECASE)
TASK_REF = re.compile(
    r"\bT(?P<a>\d+)(?P<sa>[A-Za-z]?)(?:\s*[-\u2013\u2014]\s*T?(?P<b>\d+)(?P<sb>[A-Za-z]?))?"
)
NO_DEPENDENCIES = re.compile(r"^\s*(?:none|n/?a|-|\u2014|\u2013)?\s*\.?\s*$", re.IGNORECASE)
MARK_STATES = {" ": "ready", "x": "done", "X": "done", "~": "cancelled", "-": "cancelled"}
STATUS_STATES = (
    (re.compile(r"\bnot\b|\btodo\b|\bto do\b|pending|planned|\bopen\b|\bready\b", re.I), "ready"),
    (re.compile(r"\b(?:complete|completed|done|finished)\b|✅", re.I), "done"),
    (re.compile(r"\bblocked\b", re.I), "blocked"),
    (re.compile(r"cancel|\bwon'?t\b|skipped|dropped", re.I), "cancelled"),
)


@dataclass
class _Entry:
    """One sighting of a task: a checklist line or a heading with its fields."""

    key: str
    kind: str
    index: int
    phase: int | None
    phase_name: str | None
    title: str
    tags: list[str]
    mark: str | None = None
    status: str | None = None
    description: str = ""
    acceptance: str = ""
    depends: str | None = None
    depends_index: int = 0


@dataclass
class _Reading:
    """What a pass over tasks.md collects before tasks are assembled."""

    entries: list[_Entry] = field(default_factory=list)
    phases: list[str] = field(default_factory=list)
    loose: list[int] = field(default_factory=list)


def parse_tasks(doc: Document, feature: str, spec_id: str | None, parsed: Parsed) -> list[TaskDoc]:
    """One feature's tasks.md as TaskDocs; skips and notices go to `parsed`."""
    if doc.front_matter is not None:
        parsed.notices.append(
            Notice(doc.source(), "the YAML front matter of tasks.md is not imported")
        )
    reading = _read_entries(doc)
    if reading.loose:
        parsed.notices.append(
            Notice(
                doc.source(reading.loose[0]),
                f"{len(reading.loose)} checklist items without a task id were not imported",
            )
        )
    chosen = _combine(doc, reading.entries, parsed)
    tasks = {key: _task(doc, entries, feature, spec_id, parsed) for key, entries in chosen.items()}
    _depend(doc, chosen, tasks, reading.phases, feature, parsed)
    return list(tasks.values())


def _read_entries(doc: Document) -> _Reading:
    reading = _Reading()
    at = {heading.index: heading for heading in doc.headings}
    phase: int | None = None
    phase_level = 0
    index = doc.body_start
    while index < len(doc.lines):
        heading = at.get(index)
        if doc.fenced[index]:
            index += 1
        elif heading is not None and PHASE.match(heading.text):
            reading.phases.append(heading.text)
            phase, phase_level = len(reading.phases) - 1, heading.level
            index += 1
        elif heading is not None and (match := TASK_HEADING.match(heading.text)):
            reading.entries.append(_heading_entry(doc, heading, match, phase, reading.phases))
            index = doc.section_end(heading)
        elif heading is not None:
            if phase is not None and heading.level <= phase_level:
                phase = None
            index += 1
        else:
            index = _read_line(doc, index, phase, reading)
    return reading


def _read_line(doc: Document, index: int, phase: int | None, reading: _Reading) -> int:
    box = CHECKBOX.match(doc.lines[index])
    if box is None:
        return index + 1
    continuation, end = item_continuation(doc, index, len(box.group("indent")))
    match = TASK_LINE.match(box.group("rest"))
    if match is None:
        reading.loose.append(index)
        return end
    tags, title = _split_tags(match.group("rest"))
    inline = INLINE_DEPENDS.search(title)
    reading.entries.append(
        _Entry(
            key=match.group("id"),
            kind="checkbox",
            index=index,
            phase=phase,
            phase_name=reading.phases[phase] if phase is not None else None,
            title=title,
            tags=tags,
            mark=box.group("mark"),
            description=join_block(continuation),
            depends=inline.group("refs") if inline else None,
            depends_index=index,
        )
    )
    return end


def _heading_entry(
    doc: Document, heading: Heading, match: re.Match, phase: int | None, phases: list[str]
) -> _Entry:
    tags, title = _split_tags(match.group("rest"))
    entry = _Entry(
        key=match.group("id"),
        kind="heading",
        index=heading.index,
        phase=phase,
        phase_name=phases[phase] if phase is not None else None,
        title=title,
        tags=tags,
    )
    _read_fields(doc, heading.index + 1, doc.section_end(heading), entry)
    return entry


def _read_fields(doc: Document, start: int, end: int, entry: _Entry) -> None:
    """Fill `entry` from a task heading's body: its Depends, Status and Acceptance fields."""
    description: list[str] = []
    acceptance: list[str] | None = None
    for index in range(start, end):
        line = doc.lines[index]
        match = None if doc.fenced[index] else FIELD.match(line)
        name = match.group("name").strip().lower() if match else None
        if match and name in DEPENDS_FIELDS:
            entry.depends, entry.depends_index, acceptance = match.group("value"), index, None
        elif match and name == "status":
            entry.status, acceptance = match.group("value").strip(), None
        elif match and name in ACCEPTANCE_FIELDS:
            acceptance = [match.group("value")] if match.group("value").strip() else []
            entry.acceptance = ""
        elif match:
            acceptance = None
            description.append(line)
        elif acceptance is not None:
            acceptance.append(line)
        else:
            description.append(line)
        if acceptance is not None:
            entry.acceptance = join_block(acceptance)
    entry.description = join_block(description)


def _split_tags(text: str) -> tuple[list[str], str]:
    """Leading `[P]`/`[US1]` tags and a trailing `[P1]` off a task's text, and the title left."""
    tags: list[str] = []
    text = SEPARATOR.sub("", text.strip(), count=1)
    while match := TAG.match(text):
        tags.append(match.group("tag").strip())
        text = text[match.end() :]
    if priority := PRIORITY_TAG.search(text):
        tags.append(f"P{priority.group('n')}")
        text = text[: priority.start()]
    return tags, SEPARATOR.sub("", text.strip(), count=1).strip()


def _combine(doc: Document, entries: list[_Entry], parsed: Parsed) -> dict[str, list[_Entry]]:
    """Entries by task key, at most one checklist line and one heading each, base first."""
    chosen: dict[str, list[_Entry]] = {}
    for entry in entries:
        same = chosen.setdefault(entry.key, [])
        earlier = next((other for other in same if other.kind == entry.kind), None)
        if earlier is not None:
            parsed.skips.append(
                Skip(
                    doc.source(entry.index),
                    f"task {entry.key} again (first at line {earlier.index + 1})",
                )
            )
            continue
        same.append(entry)
        same.sort(key=lambda other: other.kind != "checkbox")
    return chosen


def _task(
    doc: Document, entries: list[_Entry], feature: str, spec_id: str | None, parsed: Parsed
) -> TaskDoc:
    base = entries[0]
    source = doc.source(base.index)
    labels, priority, extra = _tag_fields(entries)
    extra = {"key": base.key, **extra}
    if base.phase_name:
        extra["phase"] = base.phase_name
    text = base.title or next((entry.title for entry in entries if entry.title), "")
    if not text:
        parsed.notices.append(Notice(source, f"task {base.key} has no title; its id is the title"))
    title, full = short_title(text or base.key)
    description = "\n\n".join(part for part in (full, *(e.description for e in entries)) if part)
    state, status = _state(entries, source, parsed)
    return TaskDoc(
        external_id=f"{feature}/{base.key}",
        title=title,
        source=source,
        description=description,
        acceptance=next((entry.acceptance for entry in entries if entry.acceptance), ""),
        state=state,
        source_status=status,
        priority=priority,
        labels=labels,
        spec=spec_id,
        extra=extra,
    )


def _tag_fields(entries: list[_Entry]) -> tuple[list[str], int, dict]:
    labels: list[str] = []
    priority = 0
    extra: dict = {}
    for tag in (tag for entry in entries for tag in entry.tags):
        story = re.fullmatch(r"US\s*(\d+)", tag, re.IGNORECASE)
        rank = re.fullmatch(r"P([1-9])", tag)
        if tag == "P":
            label = "parallel"
        elif story:
            label = f"us{int(story.group(1))}"
        elif rank:
            priority, extra["priority"] = max(0, 4 - int(rank.group(1))), tag
            continue
        else:
            extra.setdefault("tags", []).append(tag)
            continue
        if label not in labels:
            labels.append(label)
    return labels, priority, extra


def _state(entries: list[_Entry], source: Source, parsed: Parsed) -> tuple[str, str | None]:
    box = next((entry for entry in entries if entry.mark is not None), None)
    status = next((entry.status for entry in entries if entry.status), None)
    key = entries[0].key
    if box is not None:
        state, written = MARK_STATES.get(box.mark, "ready"), f"[{box.mark}]"
        if box.mark not in " xX":
            parsed.notices.append(
                Notice(source, f"task {key} is marked {written}; read as {state}")
            )
    elif status is not None:
        state, written = _status_state(status), status
        if state is None:
            parsed.notices.append(Notice(source, f"task {key} status {status!r} is kept as ready"))
            state = "ready"
    else:
        return "ready", None
    if state == "done":
        parsed.notices.append(Notice(source, f"task {key} is done without evidence"))
    return state, written


def _status_state(status: str) -> str | None:
    for pattern, state in STATUS_STATES:
        if pattern.search(status):
            return state
    return None


def _depend(
    doc: Document,
    chosen: dict[str, list[_Entry]],
    tasks: dict[str, TaskDoc],
    phases: list[str],
    feature: str,
    parsed: Parsed,
) -> None:
    groups: list[list[str]] = [[] for _ in phases]
    for key, entries in chosen.items():
        if entries[0].phase is not None:
            groups[entries[0].phase].append(tasks[key].external_id)
    by_phase = chain_groups(groups)
    for key, entries in chosen.items():
        task = tasks[key]
        declared = next((entry for entry in entries if entry.depends is not None), None)
        explicit = _explicit(doc, declared, tasks, parsed) if declared else None
        found = by_phase.get(task.external_id, []) if explicit is None else explicit
        task.depends_on = [other for other in found if other != task.external_id]


def _explicit(
    doc: Document, entry: _Entry, tasks: dict[str, TaskDoc], parsed: Parsed
) -> list[str] | None:
    """The external ids a Depends field names, or None when it names nothing readable."""
    value = entry.depends or ""
    if NO_DEPENDENCIES.match(value):
        return []
    source = doc.source(entry.depends_index)
    numbered = [(_number(key), key) for key in tasks]
    found: list[str] = []
    for match in TASK_REF.finditer(value):
        low = int(match.group("a"))
        high = int(match.group("b")) if match.group("b") else None
        if high is None:
            wanted = (low, match.group("sa").upper())
            keys = [key for number, key in numbered if number == wanted]
        else:
            keys = [key for number, key in numbered if low <= number[0] <= high]
        if not keys:
            parsed.notices.append(
                Notice(
                    source,
                    f"task {entry.key} depends on {match.group(0)}, which is not in this file",
                )
            )
        found += [tasks[key].external_id for key in keys if tasks[key].external_id not in found]
    if not found and not any(TASK_REF.finditer(value)):
        parsed.notices.append(
            Notice(source, f"task {entry.key} depends on {value.strip()!r}; phase order is used")
        )
        return None
    return found


def _number(key: str) -> tuple[int, str]:
    match = re.fullmatch(r"T(\d+)([A-Za-z]?)", key)
    return (int(match.group(1)), match.group(2).upper()) if match else (-1, "")
