"""MADR architecture decision records: a folder of `NNNN-title.md` files.

Reading (`parse`):
- an ADR is a `.md` file named with a number (`0005-use-postgres.md`, `adr-0005-…`, `adr005-…`,
  `ADR-0013-…`) at the root of the upload or in a folder named `decisions`, `adr`, `adrs`,
  `architecture-decisions` (and the like). Other `.md` files there (README, index, templates,
  dated notes) and numbered files that are not `.md` get a Notice; files elsewhere are ignored.
  The number is kept in `number`; the external id is the file's folder and the number as
  the file name writes it (`docs/adr/0005`; `0005` for a file at the upload's root), so two
  logs in one upload or one project (`docs/adr/`, `services/x/adr/`) never take each other's
  records. A second file with a number already seen in its folder is a Skip naming both files.
- metadata comes from YAML front matter (MADR 4: `status`, `date`, `decision-makers`,
  `consulted`, `informed`), from `* Status:`/`- Deciders:`/`Date:` lines under the title
  (MADR 2 and 3), or from a `## Status` section (Nygard). Other front-matter keys go in
  `extra["front_matter"]`, other metadata lines (`Technical Story:`, …) in `extra["metadata"]`,
  and a `factory-memory:` front-matter key (what `write` puts there) back into `extra`.
  Front matter is read by `safe_yaml`: one with an alias (`*a`) refuses the whole upload.
- the title is the H1, or the front matter's `title`, less a number prefix (`1.`, `ADR-0001:`,
  `ADR013:`) and a `[Superseded by …]` prefix, which also marks the record superseded.
- `## Context and Problem Statement` is the context; `## Decision Outcome` the decision, less
  its `### Consequences` / `### Positive Consequences` / `### Negative Consequences`, which
  are the consequences. `## Considered Options` less the chosen option (`Chosen option: "…"`)
  are the alternatives, each with its `Bad, because …` arguments from `## Pros and Cons of
  the Options` as the reason. Other `##` sections go in `extra["sections"]`. Headings inside
  fenced code are text.
- statuses: proposed, draft, on hold, in progress → proposed; accepted, approved → accepted;
  rejected, declined → rejected; `superseded by ADR-0005` → superseded, and 0005 (of the same
  folder) gets this
  record in its `supersedes`; deprecated → superseded with no successor. `supersedes ADR-0045`
  in a status is recorded on the record itself. No status (or template text only) → proposed,
  an unknown one → the nearest state; both with a Notice. A successor or predecessor number
  not in the folder gets a Notice and is kept in `extra["superseded_by"]`/`extra["supersedes"]`.
- the date is read from `YYYY-MM-DD` (also in a link or quoted); anything else is kept in
  `extra["date"]`, with a Notice.

Writing (`write`) gives a MADR 4 folder that `parse` reads back to the same decisions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import PurePosixPath

import yaml

from interop.documents import DecisionDoc, Notice, Parsed, Skip, Source
from interop.formats.markdown import (
    LIST_MARKER,
    Document,
    Heading,
    indentation,
    item_continuation,
    join_block,
    read,
    short_title,
)
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

FM_KEY = "factory-memory"
ALL_ALTERNATIVES = "alternatives-listed"
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
COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
LINK = re.compile(r"\[(?P<text>[^\]]*)\]\((?P<target>[^)]*)\)")
NUMBER_PREFIX = re.compile(
    r"^\[?(?:ADR[-_ ]*)?\d+\]?\s*(?:[.:)]\s+|[-\u2013\u2014]\s+|:)", re.IGNORECASE
)
ADR_REF = re.compile(r"\bADR[-_ ]?(?P<number>\d+)", re.IGNORECASE)
BARE_NUMBER = re.compile(r"^\W*(?P<number>\d+)\b")
SUCCESSOR_CLAUSE = re.compile(r"\bsuperseded\s+by\b:?(?P<rest>.*?)(?=\bsupersedes\b|$)", re.I)
PREDECESSOR_CLAUSE = re.compile(r"\bsupersedes\b:?(?P<rest>.*?)(?=\bsuperseded\s+by\b|$)", re.I)
ISO_DATE = re.compile(r"(?P<y>\d{4})-(?P<m>\d{1,2})-(?P<d>\d{1,2})")
CHOSEN = re.compile(r"chosen\s+options?\b\s*:?(?P<rest>.*)$", re.IGNORECASE)
CHOSEN_NUMBERS = re.compile(
    r"^(?:options?\s*)?#?\d+(?:\s*(?:&|,|\+|and)\s*(?:options?\s*)?#?\d+)*\b(?![.,]\d)", re.I
)
QUOTED = re.compile(r"\s*(?:\"([^\"]+)\"|“([^”]+)”|`([^`]+)`)")
QUOTES = {'"': '"', "“": "”", "„": "“", "'": "'", "«": "»", "\u2018": "\u2019"}
AGAINST = re.compile(r"^(?:bad|cons?)\b\s*[,:]?\s*(?:because\s+)?(?P<text>.*)$", re.IGNORECASE)

CONTEXT_HEADINGS = {"context and problem statement", "context", "problem statement"}
DECISION_HEADINGS = {"decision outcome", "decision"}
CONSEQUENCES_HEADINGS = {"consequences", "positive consequences", "negative consequences"}
OPTIONS_HEADINGS = {"considered options", "options considered", "options"}
PROS_CONS_HEADINGS = {"pros and cons of the options", "pros and cons of the options considered"}
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


# Reading


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


def _own_number(external: str) -> str:
    """The number part of an external id: ``0005`` of ``docs/adr/0005``."""
    return external.rsplit("/", 1)[-1]


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
    _read_alternatives(doc, decision, parsed)
    _drop_derivable_pros_and_cons(decision)
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
    title, successor_text = _split_superseded_prefix(_plain(raw))
    title = NUMBER_PREFIX.sub("", title, count=1).strip()
    if title.startswith("[") and title.endswith("]") and "[" not in title[1:-1]:
        title = title[1:-1].strip()
    if not title:
        slug = ADR_NAME.sub("", PurePosixPath(doc.path).stem).strip("-_. ")
        title = slug.replace("-", " ").replace("_", " ").strip() or _own_number(
            decision.external_id
        )
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
        key = _key(match["key"]) if match else ""
        if match and (match["bullet"] or key in PLAIN_KEYS) and key:
            value = _plain(match["value"])
            target = meta if _our_key(key) else other
            target.setdefault(_our_key(key) or match["key"].strip(), (value, index))
        else:
            preamble.append(line)
    for key, value in front.items():
        ours = _our_key(_key(key))
        if ours:
            meta[ours] = (value, None)
        else:
            decision.extra.setdefault("front_matter", {})[key] = value
    if other:
        decision.extra["metadata"] = {key: value for key, (value, _) in other.items()}
    if join_block(preamble):
        decision.extra["preamble"] = join_block(preamble)
    return meta


def _key(text: str) -> str:
    return " ".join(text.replace("*", "").replace("_", " ").lower().split())


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
    section = _find_section(doc, STATUS_HEADINGS)
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
    clean = _plain(text or "")
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
    names = [_plain(item) for item in items]
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
    text = _plain(str(value))
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
        name = _key(_plain(heading.text)).rstrip(":")
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
            title = _plain(heading.text)
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
        and _key(_plain(h.text)).rstrip(":") in CONSEQUENCES_HEADINGS
    ]
    kept: list[str] = []
    cursor = heading.index + 1
    found: list[str] = []
    for sub in subsections:
        kept.append(join_block(doc.lines[cursor : sub.index]))
        cursor = min(doc.section_end(sub), end)
        text = join_block(doc.lines[sub.index + 1 : cursor])
        label = _plain(sub.text)
        plain_label = _key(label).rstrip(":") == "consequences"
        found.append(text if plain_label else f"**{label}**\n\n{text}")
    kept.append(join_block(doc.lines[cursor:end]))
    return "\n\n".join(part for part in kept if part), found


def _find_section(doc: Document, names: set[str], level: int = 2) -> Heading | None:
    return next(
        (h for h in doc.headings if h.level == level and _key(_plain(h.text)).rstrip(":") in names),
        None,
    )


def _section_lines(doc: Document, heading: Heading) -> list[str]:
    return doc.lines[heading.index + 1 : doc.section_end(heading)]


def _read_alternatives(doc: Document, decision: DecisionDoc, parsed: Parsed) -> None:
    """The considered options that were not chosen, each with its case against."""
    listed_all = bool(decision.extra.pop(ALL_ALTERNATIVES, False))
    reasons = _pros_and_cons(doc)
    options = _options(doc) or list(reasons)
    if not options:
        return
    chosen: list[str | None] = []
    if not listed_all:
        names = _chosen_names(decision.decision) or []
        chosen = [_match(name, options) for name in names]
        missing = next(
            (name for name, option in zip(names, chosen, strict=True) if option is None), None
        )
        if not names or missing:
            decision.extra["considered_options"] = options
            why = f"chosen option {missing!r} is none of" if missing else "no `Chosen option:` in"
            parsed.notices.append(
                Notice(decision.source, f"{why} the considered options: alternatives not imported")
            )
            return
    decision.alternatives = [
        {"option": option, "reason": _reason(option, reasons)}
        for option in options
        if option not in chosen
    ]


def _drop_derivable_pros_and_cons(decision: DecisionDoc) -> None:
    """Forget the Pros and Cons section when `write` would give it back from the alternatives."""
    sections = decision.extra.get("sections", {})
    heading = next((h for h in sections if _is_pros_and_cons(h)), None)
    if heading and _pros_and_cons_section(decision) == f"## {heading}\n\n{sections[heading]}":
        del sections[heading]
        if not sections:
            del decision.extra["sections"]


def _options(doc: Document) -> list[str]:
    """The top-level items of `## Considered Options`, each on one line."""
    section = _find_section(doc, OPTIONS_HEADINGS)
    if section is None:
        return []
    end = doc.section_end(section)
    items = [
        index
        for index in range(section.index + 1, end)
        if not doc.fenced[index] and LIST_MARKER.match(doc.lines[index])
    ]
    if not items:
        return []
    top = min(indentation(doc.lines[index]) for index in items)
    options = []
    for index in items:
        line = doc.lines[index]
        if indentation(line) != top:
            continue
        continuation, _ = item_continuation(doc, index, top)
        text = _one_line(" ".join([LIST_MARKER.sub("", line, count=1), *continuation]))
        if text and text not in ("…", "..."):
            options.append(text)
    return options


def _pros_and_cons(doc: Document) -> dict[str, str]:
    """Each `###` option under Pros and Cons, with the text of its section."""
    section = _find_section(doc, PROS_CONS_HEADINGS)
    if section is None:
        return {}
    end = doc.section_end(section)
    return {
        _one_line(h.text): doc.section_text(h)
        for h in doc.headings
        if section.index < h.index < end and h.level == 3
    }


def _reason(option: str, reasons: dict[str, str]) -> str:
    """The case against `option`: its `Bad, because …` arguments, else its pros and cons text."""
    text = next((body for title, body in reasons.items() if _same(title, option)), "")
    against = []
    for line in text.split("\n"):
        item = LIST_MARKER.match(line)
        match = AGAINST.match(line[item.end() :]) if item else None
        if match and match["text"]:
            against.append(match["text"].strip())
    summary = "; ".join(against) if against else text
    return short_title(_plain(summary))[0] if summary else ""


def _chosen_names(decision: str) -> list[str] | None:
    """What a `Chosen option(s): …` line names, or None when the decision has no such line.

    Options may be named by number (`Chosen options: 1 & 3`, `option 2`), in quotes or
    backticks, plainly up to `, because`, or, with nothing after the colon, by the list that
    follows.
    """
    lines = decision.split("\n")
    for index, line in enumerate(lines):
        match = CHOSEN.search(line.replace("**", "").replace("__", ""))
        if match is None:
            continue
        rest = match["rest"].strip(" *_\t")
        if not rest:
            items = _following_items(lines[index + 1 :])
            return [_one_line(LIST_MARKER.sub("", item, count=1)) for item in items]
        numbers = CHOSEN_NUMBERS.match(rest)
        if numbers:
            return re.findall(r"\d+", numbers.group(0))
        if rest[:1] in '"“`':
            return _quoted_names(rest)
        rest = re.split(r",?\s+because\b", rest, maxsplit=1)[0]
        return [name for name in (_option_name(part) for part in rest.split(" & ")) if name]
    return None


def _quoted_names(text: str) -> list[str]:
    """The quoted names at the head of `text`: `"A"`, or `` `A` & `B` `` and the like."""
    names = []
    while True:
        match = QUOTED.match(text)
        if match is None:
            return names
        names.append(_one_line(next(g for g in match.groups() if g)))
        text = re.sub(r"^\s*(?:&|,|\+|and)\s*", "", text[match.end() :], count=1)


def _match(name: str, options: list[str]) -> str | None:
    """The considered option `name` names: by number, by name, or as the one whose words
    include all of its words."""
    if name.isdigit():
        number = int(name)
        return options[number - 1] if 1 <= number <= len(options) else None
    exact = [option for option in options if _normal(option) == _normal(name)]
    same = exact or [option for option in options if _same(option, name)]
    if len(same) == 1:
        return same[0]
    words = _words(name)
    holding = [option for option in options if words and words <= _words(option)]
    return holding[0] if len(holding) == 1 else None


def _words(text: str) -> set[str]:
    """The words of `text`, lower case, a plural `s` dropped."""
    words = re.findall(r"\w+", _normal(text))
    return {w[:-1] if len(w) > 3 and w.endswith("s") else w for w in words}


def _following_items(lines: list[str]) -> list[str]:
    """The top-level list items at the head of `lines` (blank lines before them skipped)."""
    items: list[str] = []
    for line in lines:
        if not line.strip():
            if items:
                break
            continue
        if not LIST_MARKER.match(line):
            if not items or not line.startswith((" ", "\t")):
                break
            continue
        if indentation(line) == 0:
            items.append(line.strip())
    return items


def _chosen_option(decision: str) -> str | None:
    """The one option a decision names by name, which `write` lists first."""
    names = _chosen_names(decision)
    if not names or len(names) != 1 or names[0].isdigit():
        return None
    return names[0]


def _option_name(rest: str) -> str | None:
    if rest[:1] in QUOTES:
        close = rest.find(QUOTES[rest[0]], 1)
        name = rest[1:close] if close > 0 else rest[1:]
    else:
        name = re.split(r",|\s+because\b|\.\s|\.$", rest, maxsplit=1)[0]
    name = _one_line(name)
    return name or None


def _same(one: str, other: str) -> bool:
    """Whether two option names name the same option (links, emphasis and case aside)."""
    a, b = _normal(one), _normal(other)
    if a == b:
        return True
    short, long = sorted((a, b), key=len)
    return len(short) >= 6 and long.startswith(short)


def _normal(text: str) -> str:
    text = LINK.sub(r"\g<text>", text)
    text = re.sub("[*_`\"'“”\u2018\u2019]", "", text).lower()
    return " ".join(text.split()).strip(" .,:;")


def _one_line(text: str) -> str:
    return " ".join(COMMENT.sub("", text).split())


def _plain(text: str) -> str:
    """`text` without HTML comments and surrounding emphasis or quotes, on trimmed lines."""
    text = COMMENT.sub("", text).strip()
    for mark in ("**", "__"):
        if text.startswith(mark) and text.endswith(mark) and len(text) > 4:
            text = text[2:-2].strip()
    if len(text) > 1 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1].strip()
    return text


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


# Writing

RESERVED_EXTRA = {
    "front_matter",
    "sections",
    "preamble",
    "considered_options",
    "superseded_by",
    "supersedes",
    "date",
}


def write(decisions: list[DecisionDoc]) -> dict[str, bytes]:
    """A MADR 4 folder: `NNNN-slug.md` for each decision, keyed by file name.

    A decision without a number gets the next free one. Supersede links are written as MADR
    writes them, on the predecessor (`superseded by [ADR-0005](0005-slug.md)`); one whose
    predecessor is not superseded says `supersedes …` in its own status.
    """
    numbers = _numbers(decisions)
    names = {
        id(decision): f"{numbers[id(decision)][1]}-{_slug(decision.title)}.md"
        for decision in decisions
    }
    by_id = {decision.external_id: decision for decision in decisions}
    successors: dict[str, list[DecisionDoc]] = {}
    for decision in decisions:
        for predecessor in decision.supersedes:
            successors.setdefault(predecessor, []).append(decision)
    folder = {}
    for decision in decisions:
        status = _status_line(decision, successors, by_id, names, numbers)
        text = _render(decision, status, numbers[id(decision)][1])
        folder[names[id(decision)]] = text.encode("utf-8")
    return folder


def _numbers(decisions: list[DecisionDoc]) -> dict[int, tuple[int, str]]:
    """Each decision's number and its digits as the file name writes them."""
    used = {d.number for d in decisions if d.number is not None}
    next_free = max(used, default=0) + 1
    numbers = {}
    for decision in decisions:
        if decision.number is None:
            numbers[id(decision)] = (next_free, f"{next_free:04d}")
            next_free += 1
        elif (own := _own_number(decision.external_id)).isdigit() and int(own) == decision.number:
            numbers[id(decision)] = (decision.number, own)
        else:
            numbers[id(decision)] = (decision.number, f"{decision.number:04d}")
    return numbers


def _slug(title: str) -> str:
    slug = re.sub(r"[\W_]+", "-", title.lower()).strip("-")
    return slug[:60].rstrip("-") or "decision"


def _status_line(
    decision: DecisionDoc,
    successors: dict[str, list[DecisionDoc]],
    by_id: dict[str, DecisionDoc],
    names: dict[int, str],
    numbers: dict[int, tuple[int, str]],
) -> str:
    """The decision's status as MADR writes it, supersede links included."""
    after = successors.get(decision.external_id, [])
    missing = decision.extra.get("superseded_by") or []
    if decision.state == "superseded":
        refs = [_ref(s, names, numbers) for s in after] + [f"ADR-{n}" for n in missing]
        status = f"superseded by {', '.join(refs)}" if refs else "deprecated"
    else:
        status = decision.state
    own = [
        _ref(by_id[p], names, numbers)
        for p in decision.supersedes
        if p in by_id and by_id[p].state != "superseded"
    ]
    own += [f"ADR-{p}" for p in decision.supersedes if p not in by_id]
    own += [f"ADR-{n}" for n in decision.extra.get("supersedes") or []]
    if own:
        status += f"; supersedes {', '.join(own)}"
    return status


def _ref(decision: DecisionDoc, names: dict[int, str], numbers: dict) -> str:
    return f"[ADR-{numbers[id(decision)][1]}]({names[id(decision)]})"


def _render(decision: DecisionDoc, status: str, digits: str) -> str:
    """The Markdown of one ADR: front matter, title, sections."""
    parts = [f"# {decision.title}"]
    preamble = decision.extra.get("preamble")
    if preamble:
        parts.append(preamble)
    if decision.context:
        parts.append(f"## Context and Problem Statement\n\n{decision.context}")
    options = _written_options(decision)
    if options:
        parts.append("## Considered Options\n\n" + "\n".join(f"* {o}" for o in options))
    outcome = decision.decision
    if decision.consequences:
        outcome = f"{outcome}\n\n### Consequences\n\n{decision.consequences}".strip("\n")
    if outcome:
        parts.append(f"## Decision Outcome\n\n{outcome}")
    sections = dict(decision.extra.get("sections") or {})
    if not _keeps_pros_and_cons(decision, sections):
        sections = {h: t for h, t in sections.items() if not _is_pros_and_cons(h)}
        parts.append(_pros_and_cons_section(decision))
    for heading, text in sections.items():
        parts.append(f"## {heading}\n\n{text}".rstrip("\n"))
    body = "\n\n".join(part for part in parts if part)
    return f"{_front(decision, status, digits)}\n{body}\n"


def _is_pros_and_cons(heading: str) -> bool:
    return _key(heading).rstrip(":") in PROS_CONS_HEADINGS


def _keeps_pros_and_cons(decision: DecisionDoc, sections: dict[str, str]) -> bool:
    """Whether the file's own Pros and Cons section still gives every alternative its reason."""
    heading = next((h for h in sections if _is_pros_and_cons(h)), None)
    if heading is None:
        return False
    doc = read("", f"## {heading}\n\n{sections[heading]}\n".encode())
    assert isinstance(doc, Document)  # our own text is UTF-8
    reasons = _pros_and_cons(doc)
    return all(_reason(a["option"], reasons) == a.get("reason", "") for a in decision.alternatives)


def _pros_and_cons_section(decision: DecisionDoc) -> str:
    cases = [a for a in decision.alternatives if a.get("reason")]
    body = "\n\n".join(f"### {a['option']}\n\n* Bad, because {a['reason']}" for a in cases)
    return f"## Pros and Cons of the Options\n\n{body}" if cases else ""


def _written_options(decision: DecisionDoc) -> list[str]:
    chosen = _chosen_option(decision.decision)
    alternatives = [a["option"] for a in decision.alternatives]
    if alternatives:
        return ([chosen] if chosen else []) + alternatives
    return list(decision.extra.get("considered_options") or [])


def _front(decision: DecisionDoc, status: str, digits: str) -> str:
    front: dict = {"status": status}
    if decision.date is not None:
        front["date"] = decision.date
    elif decision.extra.get("date"):
        front["date"] = decision.extra["date"]
    for key, names in (
        ("decision-makers", decision.deciders),
        ("consulted", decision.consulted),
        ("informed", decision.informed),
    ):
        if names:
            front[key] = list(names)
    front.update(decision.extra.get("front_matter") or {})
    own = {k: v for k, v in decision.extra.items() if k not in RESERVED_EXTRA}
    if decision.alternatives and not _chosen_option(decision.decision):
        own[ALL_ALTERNATIVES] = True
    if _own_number(decision.external_id) != digits:
        own["external-id"] = decision.external_id
    if own:
        front[FM_KEY] = own
    text = yaml.safe_dump(front, sort_keys=False, allow_unicode=True, default_flow_style=False)
    return f"---\n{text}---"
