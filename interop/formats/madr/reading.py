"""Reading a MADR folder (`parse`): the package's docstring says what is read from where."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import PurePosixPath

import yaml

from interop.documents import DecisionDoc, Notice, Parsed, Skip, Source
from interop.formats.madr.options import (
    OPTIONS_HEADINGS,
    drop_derivable_pros_and_cons,
    read_alternatives,
)
from interop.formats.madr.text import COMMENT, FM_KEY, LINK, as_key, find_section, own_number, plain
from interop.formats.markdown import Document, Heading, join_block, read
from interop.formats.safe_yaml import load as load_yaml

ADR_FOLDERS = {
    "adr",
    "adrs",
    "decisions",
    "decision-records",
    "decision-log",
    "architecture-decisions",
    "architecture-decision-records",
    "architecture_decisions",
    "architectural-decisions",
}
ADR_NAME = re.compile(r"^(?:adr[-_ ]?)?(?P<number>\d+)(?=[-_. ]|$)", re.IGNORECASE)
DATED_NAME = re.compile(r"^\d{4}-\d{2}-\d{2}(?:[-_. ]|$)")
MARKDOWN_SUFFIXES = (".md", ".markdown")
STATUS_KEYS = {"status"}
DECIDER_KEYS = {"deciders", "decision-makers", "decision makers", "decision_makers", "decider"}
DATE_KEYS = {"date", "decision date", "date of decision"}
LIST_KEYS = {"consulted", "informed"}
SUPERSEDES_KEYS = {"supersedes"}
SUCCESSOR_KEYS = {"superseded by", "superseded-by", "superseded_by"}
PLAIN_KEYS = STATUS_KEYS | DECIDER_KEYS | DATE_KEYS | LIST_KEYS | {"technical story"}

METADATA_LINE = re.compile(
    r"^\s*(?P<bullet>[-*+]\s+)?(?:\*\*|__)?(?P<key>[A-Za-z][A-Za-z _-]{0,30}?)(?:\*\*|__)?"
    r"\s*:\s*(?:\*\*|__)?\s*(?P<value>.*?)\s*$"
)
NUMBER_PREFIX = re.compile(
    r"^\[?(?:ADR[-_ ]*)?\d+\]?\s*(?:[.:)]\s+|[-\u2013\u2014]\s+|:)", re.IGNORECASE
)
ADR_REF = re.compile(r"\bADR[-_ ]?(?P<number>\d+)", re.IGNORECASE)
BARE_NUMBER = re.compile(r"^\W*(?P<number>\d+)\b")
SUCCESSOR_CLAUSE = re.compile(r"\bsuperseded\s+by\b:?(?P<rest>.*?)(?=\bsupersedes\b|$)", re.I)
PREDECESSOR_CLAUSE = re.compile(r"\bsupersedes\b:?(?P<rest>.*?)(?=\bsuperseded\s+by\b|$)", re.I)
ISO_DATE = re.compile(r"(?P<y>\d{4})-(?P<m>\d{1,2})-(?P<d>\d{1,2})")

CONTEXT_HEADINGS = {"context and problem statement", "context", "problem statement"}
DECISION_HEADINGS = {"decision outcome", "decision"}
CONSEQUENCES_HEADINGS = {"consequences", "positive consequences", "negative consequences"}
STATUS_HEADINGS = {"status"}

# A leading status word and the state it means; `exact` words are MADR's own or plain synonyms,
# the others lose meaning in our state and get a Notice.
STATUS_WORDS: list[tuple[str, str, bool]] = [
    ("proposed", "proposed", True),
    ("draft", "proposed", True),
    ("accepted", "accepted", True),
    ("approved", "accepted", True),
    ("rejected", "rejected", True),
    ("declined", "rejected", True),
    ("superseded", "superseded", True),
    ("deprecated", "superseded", False),
    ("on hold", "proposed", False),
    ("in progress", "proposed", False),
    ("in review", "proposed", False),
    ("under review", "proposed", False),
    ("pending", "proposed", False),
    ("open", "proposed", False),
    ("wip", "proposed", False),
    ("postponed", "proposed", False),
    ("adopted", "accepted", False),
    ("agreed", "accepted", False),
    ("decided", "accepted", False),
    ("implemented", "accepted", False),
    ("done", "accepted", False),
    ("active", "accepted", False),
    ("not accepted", "rejected", False),
    ("withdrawn", "rejected", False),
    ("abandoned", "rejected", False),
    ("cancelled", "rejected", False),
    ("canceled", "rejected", False),
    ("obsolete", "superseded", False),
    ("retired", "superseded", False),
    ("replaced", "superseded", False),
]


@dataclass
class _Record:
    """One ADR as read, with the supersede links still as numbers."""

    decision: DecisionDoc
    status_source: Source
    successors: list[tuple[int, str]] = field(default_factory=list)
    predecessors: list[tuple[int, str]] = field(default_factory=list)


@dataclass
class _Status:
    """What a status text says."""

    state: str
    successors: list[tuple[int, str]]
    predecessors: list[tuple[int, str]]
    notice: str | None


def parse(files: Mapping[str, bytes]) -> Parsed:
    """Every ADR in the upload as a DecisionDoc, supersede links resolved; nothing raises."""
    parsed = Parsed()
    records: list[_Record] = []
    by_number: dict[tuple[str, int], _Record] = {}
    for path in sorted(files):
        number_text = _adr_number(path, parsed)
        if number_text is None:
            continue
        key = (_folder(path), int(number_text))
        if key in by_number:
            first = by_number[key].decision.source.path
            parsed.skips.append(
                Skip(Source(path), f"number {number_text} is taken by {first} already")
            )
            continue
        record = _read_record(path, files[path], number_text, parsed)
        if record is not None:
            by_number[key] = record
            records.append(record)
    _link(records, parsed)
    parsed.decisions = [record.decision for record in records]
    return parsed


def _folder(path: str) -> str:
    """The folder an ADR's log is in, as the upload names it ('' at its root)."""
    parent = str(PurePosixPath(path).parent)
    return "" if parent == "." else parent


def external_id(folder: str, number_text: str) -> str:
    """An ADR's id: its folder and its number as its file name writes it (``docs/adr/0005``)."""
    return f"{folder}/{number_text}" if folder else number_text


def _adr_number(path: str, parsed: Parsed) -> str | None:
    """The number a file's name gives it as an ADR, or None (with a Notice when it matters)."""
    posix = PurePosixPath(path)
    folder = posix.parent.name.lower()
    if str(posix.parent) != "." and folder not in ADR_FOLDERS:
        return None
    name = posix.name
    match = ADR_NAME.match(name)
    is_markdown = name.lower().endswith(MARKDOWN_SUFFIXES)
    if not is_markdown:
        if match:
            parsed.notices.append(Notice(Source(path), "numbered, but not a .md file: not read"))
        return None
    if match is None or DATED_NAME.match(name):
        parsed.notices.append(Notice(Source(path), "not an ADR (no number in its name)"))
        return None
    if "template" in name.lower():
        parsed.notices.append(Notice(Source(path), "an ADR template, not an ADR"))
        return None
    return match["number"]


def _read_record(path: str, data: bytes, number_text: str, parsed: Parsed) -> _Record | None:
    doc = read(path, data)
    if isinstance(doc, Skip):
        parsed.skips.append(doc)
        return None
    front = _front_matter(doc, parsed)
    own_extra = front.pop(FM_KEY, None)
    h1 = doc.h1()
    decision = DecisionDoc(
        external_id=external_id(_folder(path), number_text),
        title="",
        source=doc.source(h1.index if h1 else 0),
        number=int(number_text),
    )
    record = _Record(decision, decision.source)
    heading_successors = _read_title(doc, h1, front, decision, parsed)
    meta = _metadata(doc, h1, front, decision)
    status_text, record.status_source = _status_text(doc, meta, decision)
    _read_sections(doc, decision, parsed)
    _read_people(meta, decision)
    _read_date(meta.get("date"), decision, record.status_source, parsed)
    if isinstance(own_extra, dict):
        decision.extra.update(own_extra)
    _apply_status(record, status_text, heading_successors, meta, parsed)
    read_alternatives(doc, decision, parsed)
    drop_derivable_pros_and_cons(decision)
    return record


def _front_matter(doc: Document, parsed: Parsed) -> dict:
    """The YAML front matter as a dict with string keys; {} (with a Notice) if unreadable.

    Read by ``safe_yaml``: an alias or deep nesting refuses the whole upload (``Refusal``).
    """
    text = doc.front_matter
    if text is None or not text.strip():
        return {}
    try:
        loaded = load_yaml(text, path=doc.path, first_line=2)  # line 1 is the `---`
    except yaml.YAMLError as error:
        parsed.notices.append(Notice(doc.source(0), f"front matter is not YAML: {error}"))
        return {}
    if not isinstance(loaded, dict):
        parsed.notices.append(Notice(doc.source(0), "front matter is not a mapping: not read"))
        return {}
    return {str(key): value for key, value in loaded.items()}


def _read_title(
    doc: Document, h1: Heading | None, front: dict, decision: DecisionDoc, parsed: Parsed
) -> list[tuple[int, str]]:
    """Set the title; return the successors a `[Superseded by …]` prefix names."""
    if h1 is not None:
        raw = h1.text
    elif isinstance(front.get("title"), str):
        raw = front["title"]
    else:
        raw = ""
    title, successor_text = _split_superseded_prefix(plain(raw))
    title = NUMBER_PREFIX.sub("", title, count=1).strip()
    if title.startswith("[") and title.endswith("]") and "[" not in title[1:-1]:
        title = title[1:-1].strip()
    if not title:
        slug = ADR_NAME.sub("", PurePosixPath(doc.path).stem).strip("-_. ")
        title = slug.replace("-", " ").replace("_", " ").strip() or own_number(decision.external_id)
        parsed.notices.append(Notice(decision.source, f"no title: named {title!r} from the file"))
    decision.title = title
    return _references(successor_text) if successor_text is not None else []


def _split_superseded_prefix(title: str) -> tuple[str, str | None]:
    """`[Superseded by [ADR-0019](…)] Push Metrics` → (`Push Metrics`, `[ADR-0019](…)`)."""
    if not title.startswith("[") or not title[1:].lstrip().lower().startswith("superseded by"):
        return title, None
    depth = 0
    for index, char in enumerate(title):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth == 0:
            inner = title[1:index].strip()
            return title[index + 1 :].strip(), inner[len("superseded by") :]
    return title, None


def _metadata(doc: Document, h1: Heading | None, front: dict, decision: DecisionDoc) -> dict:
    """The record's metadata by our keys (status, deciders, date, consulted, informed, …).

    Front matter wins over `* Key: value` lines between the title and the first section. Lines
    there that are no metadata are kept as `extra["preamble"]`.
    """
    meta: dict = {}
    other: dict = {}
    preamble: list[str] = []
    start = h1.index + 1 if h1 else doc.body_start
    end = next((h.index for h in doc.headings if h.index >= start), len(doc.lines))
    for index in range(start, end):
        line = doc.lines[index]
        match = None if doc.fenced[index] else METADATA_LINE.match(line)
        key = as_key(match["key"]) if match else ""
        if match and (match["bullet"] or key in PLAIN_KEYS) and key:
            value = plain(match["value"])
            target = meta if _our_key(key) else other
            target.setdefault(_our_key(key) or match["key"].strip(), (value, index))
        else:
            preamble.append(line)
    for key, value in front.items():
        ours = _our_key(as_key(key))
        if ours:
            meta[ours] = (value, None)
        else:
            decision.extra.setdefault("front_matter", {})[key] = value
    if other:
        decision.extra["metadata"] = {key: value for key, (value, _) in other.items()}
    if join_block(preamble):
        decision.extra["preamble"] = join_block(preamble)
    return meta


def _our_key(key: str) -> str | None:
    """Our name for a metadata key, or None for one we do not map."""
    if key in STATUS_KEYS:
        return "status"
    if key in DECIDER_KEYS:
        return "deciders"
    if key in DATE_KEYS:
        return "date"
    if key in LIST_KEYS:
        return key
    if key in SUPERSEDES_KEYS:
        return "supersedes"
    if key.replace("-", " ").replace("_", " ") in SUCCESSOR_KEYS:
        return "superseded by"
    return None


def _status_text(doc: Document, meta: dict, decision: DecisionDoc) -> tuple[str | None, Source]:
    """The status as written, and where; a `## Status` section counts when nothing else says.

    Lines of that section after its first are kept in `extra["status_note"]`.
    """
    section = find_section(doc, STATUS_HEADINGS)
    if "status" in meta:
        value, index = meta["status"]
        if section is not None and doc.section_text(section):
            decision.extra["status_note"] = doc.section_text(section)
        return _as_text(value), doc.source(index if index is not None else _front_line(doc))
    if section is None:
        return None, decision.source
    lines = [
        COMMENT.sub("", line).strip()
        for index, line in enumerate(_section_lines(doc, section))
        if not doc.fenced[section.index + 1 + index]
    ]
    lines = [line for line in lines if line]
    if not lines:
        return None, doc.source(section.index)
    if len(lines) > 1:
        decision.extra["status_note"] = "\n".join(lines[1:])
    return lines[0], doc.source(section.index)


def _front_line(doc: Document) -> int:
    """Index of the front matter's `status:` line (0 when there is none)."""
    for index in range(1, doc.body_start):
        if doc.lines[index].lower().startswith("status:"):
            return index
    return 0


def _as_text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, list):
        return ", ".join(str(item) for item in value)
    return str(value)


def _apply_status(
    record: _Record,
    text: str | None,
    heading_successors: list[tuple[int, str]],
    meta: dict,
    parsed: Parsed,
) -> None:
    """Set state and source_status; collect the supersede links the record names.

    A successor named outside the status (a `[Superseded by …]` title, a `Superseded by:`
    line) makes the record superseded whatever its status says.
    """
    decision = record.decision
    status = _interpret(text)
    decision.source_status = text.strip() if text and text.strip() else None
    decision.state = status.state
    note = decision.extra.get("status_note")
    other_successors = [*heading_successors, *_meta_references(meta, "superseded by")]
    record.successors = _unique([*status.successors, *other_successors])
    record.predecessors = _unique(
        [
            *status.predecessors,
            *(_interpret(note).predecessors if note else []),
            *_meta_references(meta, "supersedes"),
        ]
    )
    if other_successors and decision.state != "superseded":
        decision.state = "superseded"
    if status.notice:
        parsed.notices.append(Notice(record.status_source, status.notice))


def _meta_references(meta: dict, key: str) -> list[tuple[int, str]]:
    value = _as_text(meta.get(key, (None, None))[0])
    return _references(value) if value else []


def _interpret(text: str | None) -> _Status:
    """The state a status text means, the ADR numbers it names, and what the report must say."""
    clean = plain(text or "")
    if not clean or _is_placeholder(clean):
        return _Status("proposed", [], [], "no status: imported as proposed")
    lower = clean.lower()
    successors = [ref for match in SUCCESSOR_CLAUSE.finditer(clean) for ref in _refs(match)]
    predecessors = [ref for match in PREDECESSOR_CLAUSE.finditer(clean) for ref in _refs(match)]
    word = next((entry for entry in STATUS_WORDS if _starts_with_word(lower, entry[0])), None)
    if word is None:
        return _unknown_status(clean, lower, successors, predecessors)
    keyword, state, exact = word
    rest = _leftover(lower, keyword)
    notice = None
    if keyword == "deprecated":
        notice = "deprecated: imported as superseded, with no successor"
    elif keyword == "superseded" and not successors:
        notice = f"{clean!r} names no successor: imported as superseded"
    elif not exact or rest:
        notice = f"status {clean!r} imported as {state}"
    return _Status(state, successors, predecessors, notice)


def _unknown_status(clean: str, lower: str, successors: list, predecessors: list) -> _Status:
    """A status that starts with no word we know: the state of the first one it holds, if any."""
    if successors:
        return _Status("superseded", successors, predecessors, None)
    found = [(lower.find(word), state) for word, state, _ in STATUS_WORDS if word in lower]
    state = min(found)[1] if found else "proposed"
    return _Status(state, [], predecessors, f"unknown status {clean!r}: imported as {state}")


def _starts_with_word(text: str, word: str) -> bool:
    return text.startswith(word) and (len(text) == len(word) or not text[len(word)].isalnum())


def _leftover(text: str, keyword: str) -> str:
    """What a status says past its state word, supersede clauses and dates aside."""
    text = SUCCESSOR_CLAUSE.sub("", text)
    text = PREDECESSOR_CLAUSE.sub("", text).strip()
    text = ISO_DATE.sub("", text.removeprefix(keyword))
    return text.strip(" \t.,;:-\u2013\u2014()[]")


def _is_placeholder(text: str) -> bool:
    """Template text such as `[proposed | rejected | accepted …]` or `{status}`."""
    return text.startswith(("{", "[")) and ("|" in text or text.endswith(("}", "]")))


def _refs(match: re.Match) -> list[tuple[int, str]]:
    return _references(match["rest"])


def _references(text: str) -> list[tuple[int, str]]:
    """The ADR numbers a text names, as (number, digits as written), in order.

    A link names the number of the file it points to (or of its text); without links, `ADR-12`
    forms count, and failing those a bare leading number.
    """
    found: list[tuple[int, str]] = []
    for link in LINK.finditer(text):
        name = PurePosixPath(link["target"].split("#")[0].strip(' "{}<>')).name
        name = name.removeprefix("ref ").strip('" ')
        match = ADR_NAME.match(name) or ADR_REF.search(link["text"])
        match = match or BARE_NUMBER.match(link["text"])
        if match:
            found.append((int(match["number"]), match["number"]))
    if not found:
        found = [(int(m["number"]), m["number"]) for m in ADR_REF.finditer(text)]
    if not found:
        match = BARE_NUMBER.match(text)
        if match:
            found = [(int(match["number"]), match["number"])]
    return _unique(found)


def _unique(refs: list[tuple[int, str]]) -> list[tuple[int, str]]:
    seen: set[int] = set()
    kept = []
    for ref in refs:
        if ref[0] not in seen:
            seen.add(ref[0])
            kept.append(ref)
    return kept


def _read_people(meta: dict, decision: DecisionDoc) -> None:
    decision.deciders = _names(meta.get("deciders", (None, None))[0])
    decision.consulted = _names(meta.get("consulted", (None, None))[0])
    decision.informed = _names(meta.get("informed", (None, None))[0])


def _names(value: object) -> list[str]:
    """A list of people from a YAML list or a comma-separated line (commas in brackets kept)."""
    if value is None:
        return []
    items = [str(item) for item in value] if isinstance(value, list) else _split(str(value))
    names = [plain(item) for item in items]
    return [name for name in names if name and not _is_placeholder(name)]


def _split(text: str) -> list[str]:
    """`text` split at commas that are not inside brackets or parentheses."""
    parts, depth, current = [], 0, []
    for char in text:
        depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(char, 0)
        if char == "," and depth <= 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [part.strip() for part in parts]


def _read_date(value: object, decision: DecisionDoc, where: Source, parsed: Parsed) -> None:
    if isinstance(value, tuple):
        value = value[0]
    if value is None or value == "":
        return
    if isinstance(value, datetime):
        decision.date = value.date()
        return
    if isinstance(value, date):
        decision.date = value
        return
    text = plain(str(value))
    match = ISO_DATE.search(LINK.sub(r"\g<text>", text))
    if match:
        try:
            decision.date = date(int(match["y"]), int(match["m"]), int(match["d"]))
            return
        except ValueError:
            pass
    if _is_placeholder(text):
        return
    decision.extra["date"] = text
    parsed.notices.append(Notice(where, f"date {text!r} is not YYYY-MM-DD: not imported"))


def _read_sections(doc: Document, decision: DecisionDoc, parsed: Parsed) -> None:
    """Context, decision and consequences; other `##` sections into `extra["sections"]`."""
    sections: dict[str, str] = {}
    consequences: list[str] = []
    for heading in doc.headings:
        if heading.level != 2:
            continue
        name = as_key(plain(heading.text)).rstrip(":")
        if name in CONTEXT_HEADINGS and not decision.context:
            decision.context = doc.section_text(heading)
        elif name in DECISION_HEADINGS and not decision.decision:
            decision.decision, found = _outcome(doc, heading)
            consequences = found + consequences
        elif name in CONSEQUENCES_HEADINGS:
            consequences.append(doc.section_text(heading))
        elif name in OPTIONS_HEADINGS | STATUS_HEADINGS:
            continue
        else:
            title = plain(heading.text)
            text = doc.section_text(heading)
            sections[title] = f"{sections[title]}\n\n{text}" if title in sections else text
    decision.consequences = "\n\n".join(part for part in consequences if part)
    if sections:
        decision.extra["sections"] = sections


def _outcome(doc: Document, heading: Heading) -> tuple[str, list[str]]:
    """The Decision Outcome's text less its consequence subsections, and those subsections.

    One `### Consequences` gives its text; positive and negative ones are each labelled.
    """
    end = doc.section_end(heading)
    subsections = [
        h
        for h in doc.headings
        if heading.index < h.index < end
        and h.level > 2
        and as_key(plain(h.text)).rstrip(":") in CONSEQUENCES_HEADINGS
    ]
    kept: list[str] = []
    cursor = heading.index + 1
    found: list[str] = []
    for sub in subsections:
        kept.append(join_block(doc.lines[cursor : sub.index]))
        cursor = min(doc.section_end(sub), end)
        text = join_block(doc.lines[sub.index + 1 : cursor])
        label = plain(sub.text)
        plain_label = as_key(label).rstrip(":") == "consequences"
        found.append(text if plain_label else f"**{label}**\n\n{text}")
    kept.append(join_block(doc.lines[cursor:end]))
    return "\n\n".join(part for part in kept if part), found


def _section_lines(doc: Document, heading: Heading) -> list[str]:
    return doc.lines[heading.index + 1 : doc.section_end(heading)]


def _link(records: list[_Record], parsed: Parsed) -> None:
    """Turn supersede numbers into `supersedes` ids, within the record's own folder; unknown
    numbers into Notices and extra."""
    by_number = {
        (_folder(record.decision.source.path), record.decision.number): record for record in records
    }
    for record in records:
        decision = record.decision
        folder = _folder(decision.source.path)
        for number, written in record.successors:
            successor = by_number.get((folder, number))
            if successor is None:
                _missing(record, "superseded_by", written, "superseded by", parsed)
            elif decision.external_id not in successor.decision.supersedes:
                successor.decision.supersedes.append(decision.external_id)
        for number, written in record.predecessors:
            predecessor = by_number.get((folder, number))
            if predecessor is None:
                _missing(record, "supersedes", written, "supersedes", parsed)
            elif predecessor.decision.external_id not in decision.supersedes:
                decision.supersedes.append(predecessor.decision.external_id)


def _missing(record: _Record, key: str, written: str, verb: str, parsed: Parsed) -> None:
    kept = record.decision.extra.setdefault(key, [])
    if written not in kept:
        kept.append(written)
    parsed.notices.append(
        Notice(record.status_source, f"{verb} ADR {written}, which is not in the folder")
    )
