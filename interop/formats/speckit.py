"""spec-kit (github/spec-kit) feature folders: `specs/NNN-feature/spec.md` and `tasks.md`.

A feature folder is any folder named `<digits>-<name>` holding a `spec.md` or a `tasks.md`,
wherever it sits (`specs/`, `.specify/specs/feature/`, …). Its name is the SpecDoc's external id.

spec.md gives one SpecDoc. Its criteria keep the file's keys:

- requirement lines `- **FR-001**: …` with any key of that shape (`FR-001`, `SC-004`,
  `NFR-012`, `FR-R001`, `FR-007a`), with or without the list dash; plain `FR-001: …` lines
  (FR, NFR, SC, UX, AC, REQ); and, under an `Acceptance Criteria` heading, `- **any-key**: …`;
- acceptance scenarios of `### User Story N - Title (Priority: Pn)` → `US{N}-AS{k}`, the text
  being the scenario followed by ` (User Story N: Title)`; scenarios under an `Acceptance
  Scenarios` heading outside any user story (the older template) → `AS{k}`. A scenario is a
  numbered (or bulleted) item with its continuation lines, or a `#### Scenario k: Title`
  heading over a list of Given/When/Then steps. `k` is the number the file wrote, unless those
  numbers do not increase (then the position, with a Notice).

An item marked removed (`*(Removed)*`, `~~FR-001~~`), the template's own example left in a
file (the list after `*Example of marking unclear requirements:*`), an item with no text, and
a key seen before in the same spec become Skips. `[NEEDS CLARIFICATION: …]` markers outside
code become open questions (the template's own `specific question` placeholder excepted).

Proof mapping (the caller loads it from its mapping file)::

    {
      "FR-001": {"check": "tests", "select": "tests/test_albums.py::*"},
      "001-photo-albums": {"SC-002": {"check": "evidence", "kind": "screenshot"}},
    }

A value holding `check` is a proof for that key in every feature; any other value is a feature
folder name mapping keys to proofs for that feature only, which wins. A proof is
`{"check": "review"}`, `{"check": "tests", "select": str}` or `{"check": "evidence",
"kind": str}`; anything else is reported and the criterion keeps review. Criteria the mapping
does not name are checked by review. Mapping entries that match no criterion are reported.

tasks.md is read by `interop.formats.speckit_tasks`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise

from interop.documents import CriterionDoc, Notice, Parsed, Skip, Source, SpecDoc
from interop.formats.markdown import (
    SEPARATOR,
    Document,
    item_continuation,
    item_text,
    join_block,
    read,
    short_title,
)
from interop.formats.speckit_tasks import parse_tasks

FEATURE_FOLDER = re.compile(r"^\d+-[^/]+$")
KEY = r"[A-Z]{1,5}(?:-[A-Z]{1,5})?-[A-Z]?\d{1,4}[a-z]?"
KEY_LINE = re.compile(
    rf"^(?P<indent>\s*)(?:[-*+]\s+|\d+[.)]\s+)?(?P<strike>~~)?\*\*(?P<key>{KEY}):?\*\*(?P<rest>.*)$"
)
PLAIN_KEY_LINE = re.compile(
    r"^(?P<indent>\s*)(?:[-*+]\s+)?(?P<key>(?:FR|NFR|SC|UX|AC|REQ)-[A-Z]?\d{1,4}[a-z]?)\s*:\s*"
    r"(?P<rest>\S.*)$"
)
ANY_KEY_LINE = re.compile(r"^(?P<indent>\s*)[-*+]\s+\*\*(?P<key>[\w.:/-]{1,32}):?\*\*(?P<rest>.*)$")
SCENARIO_WORDS = {"given", "when", "then", "and", "but"}
STORY = re.compile(
    r"^User Story\s+(?P<n>\d+)\s*(?:[-\u2013\u2014:]\s*(?P<title>.*?))?\s*(?:\(Priority:[^)]*\))?\s*$",
    re.IGNORECASE,
)
SCENARIOS_LABEL = re.compile(
    r"^\s*(?:\*\*|#+\s*)?Acceptance Scenarios\s*:?\s*(?:\*\*)?\s*:?\s*$", re.I
)
NUMBERED = re.compile(r"^(?P<indent>\s*)(?P<n>\d{1,4})[.)]\s+(?P<text>.*)$")
SCENARIO_HEADING = re.compile(
    r"^Scenario\s+(?P<n>\d{1,4})\s*[:.\-\u2013\u2014]?\s*(?P<title>.*)$", re.I
)
BULLET = re.compile(r"^(?P<indent>\s*)[-*+]\s+(?P<text>.*)$")
STORY_SUFFIX = re.compile(r"^(?P<scenario>.*) \(User Story (?P<n>\d+): (?P<title>.*)\)$", re.DOTALL)
CLARIFICATION = re.compile(r"\[NEEDS CLARIFICATION:\s*(?P<question>[^\]]*?)\s*\]")
TEMPLATE_QUESTION = "specific question"
TEMPLATE_EXAMPLE = re.compile(r"^\s*[*_]Example of marking unclear requirements:[*_]\s*$", re.I)
REMOVED = re.compile(r"^(?:[*_~]+\(?|\()\s*removed\b|^~~.*~~$", re.IGNORECASE | re.DOTALL)


def parse(files: Mapping[str, bytes], *, mapping: dict | None = None) -> Parsed:
    """Read every spec-kit feature folder among `files` (POSIX path → bytes).

    Never raises for file content: unreadable pieces become Skips, guesses become Notices.
    """
    parsed = Parsed()
    proofs = _Proofs(mapping or {}, parsed)
    seen: dict[str, str] = {}
    for folder, names in sorted(_feature_folders(files).items()):
        feature = folder.rsplit("/", 1)[-1]
        if feature in seen:
            first = seen[feature]
            path = names.get("spec.md") or names["tasks.md"]
            parsed.skips.append(
                Skip(Source(path), f"feature {feature} was already read from {first}")
            )
            continue
        seen[feature] = folder
        spec_id = _read_spec(files, names.get("spec.md"), feature, proofs, parsed)
        if "tasks.md" in names:
            _read_tasks(files, names["tasks.md"], feature, spec_id, parsed)
    proofs.report_unused()
    return parsed


def _feature_folders(files: Mapping[str, bytes]) -> dict[str, dict[str, str]]:
    folders: dict[str, dict[str, str]] = {}
    for path in files:
        folder, _, name = path.rpartition("/")
        if name in ("spec.md", "tasks.md") and FEATURE_FOLDER.match(folder.rpartition("/")[2]):
            folders.setdefault(folder, {})[name] = path
    return folders


def _read_spec(
    files: Mapping[str, bytes], path: str | None, feature: str, proofs: _Proofs, parsed: Parsed
) -> str | None:
    if path is None:
        return None
    doc = read(path, files[path])
    if isinstance(doc, Skip):
        parsed.skips.append(doc)
        return None
    parsed.specs.append(parse_spec(doc, feature, proofs, parsed))
    return feature


def _read_tasks(
    files: Mapping[str, bytes], path: str, feature: str, spec_id: str | None, parsed: Parsed
) -> None:
    doc = read(path, files[path])
    if isinstance(doc, Skip):
        parsed.skips.append(doc)
        return
    if spec_id is None:
        parsed.notices.append(
            Notice(doc.source(), f"{feature} has no readable spec.md; its tasks belong to no spec")
        )
    parsed.tasks.extend(parse_tasks(doc, feature, spec_id, parsed))


# --- spec.md ------------------------------------------------------------------------------


class _Proofs:
    """The caller's proof mapping, checked, and which of its entries were used."""

    def __init__(self, mapping: Mapping, parsed: Parsed) -> None:
        self.parsed = parsed
        self.shared: dict[str, object] = {}
        self.scoped: dict[str, dict[str, object]] = {}
        for name, value in mapping.items():
            if isinstance(value, Mapping) and "check" not in value:
                self.scoped[str(name)] = dict(value)
            else:
                self.shared[str(name)] = value
        self.used: set[tuple[str | None, str]] = set()

    def proof(self, feature: str, key: str, source: Source) -> dict:
        """The proof the mapping names for `key` in `feature`, or review."""
        if key in self.scoped.get(feature, {}):
            self.used.add((feature, key))
            return self._checked(self.scoped[feature][key], key, source)
        if key in self.shared:
            self.used.add((None, key))
            return self._checked(self.shared[key], key, source)
        return {"check": "review"}

    def _checked(self, value: object, key: str, source: Source) -> dict:
        proof = valid_proof(value)
        if proof is None:
            self.parsed.notices.append(
                Notice(source, f"the mapping gives {key} an unusable proof {value!r}; kept review")
            )
            return {"check": "review"}
        return proof

    def report_unused(self) -> None:
        unused = [key for key in self.shared if (None, key) not in self.used]
        unused += [
            f"{feature}/{key}"
            for feature, keys in self.scoped.items()
            for key in keys
            if (feature, key) not in self.used
        ]
        for name in unused:
            self.parsed.notices.append(
                Notice(Source("<mapping>"), f"the mapping names {name}, which no spec has")
            )


def valid_proof(value: object) -> dict | None:
    """`value` as a proof of ours, or None when it is not one."""
    if not isinstance(value, Mapping):
        return None
    check = value.get("check")
    if check == "review":
        return {"check": "review"}
    if check == "tests" and isinstance(value.get("select"), str) and value["select"].strip():
        return {"check": "tests", "select": value["select"].strip()}
    if check == "evidence" and isinstance(value.get("kind"), str) and value["kind"].strip():
        return {"check": "evidence", "kind": value["kind"].strip()}
    return None


@dataclass
class _Candidate:
    key: str
    text: str
    index: int
    skip: str | None = None


def parse_spec(doc: Document, feature: str, proofs: _Proofs, parsed: Parsed) -> SpecDoc:
    """One feature's spec.md as a SpecDoc; skips and notices go to `parsed`."""
    candidates = sorted(
        [*_requirements(doc), *_scenarios(doc, parsed)], key=lambda found: found.index
    )
    criteria: list[CriterionDoc] = []
    first_line: dict[str, int] = {}
    for found in candidates:
        source = doc.source(found.index)
        if found.skip:
            parsed.skips.append(Skip(source, f"{found.key} is {found.skip}"))
        elif not found.text:
            parsed.skips.append(Skip(source, f"{found.key} has no text"))
        elif found.key in first_line:
            parsed.skips.append(
                Skip(
                    source,
                    f"duplicate criterion key {found.key} (first at line {first_line[found.key]})",
                )
            )
        else:
            first_line[found.key] = source.line
            proof = proofs.proof(feature, found.key, source)
            criteria.append(CriterionDoc(found.key, found.text, source, proof))
    return SpecDoc(
        external_id=feature,
        title=_title(doc, feature, parsed),
        body=doc.text,
        criteria=criteria,
        source=doc.source(),
        open_questions=open_questions(doc),
    )


def _title(doc: Document, feature: str, parsed: Parsed) -> str:
    heading = doc.h1()
    if heading is None or not heading.text:
        parsed.notices.append(Notice(doc.source(), "no H1 title; the folder name is the title"))
        return feature
    title = re.sub(r"^Feature Specification:\s*", "", heading.text, flags=re.IGNORECASE)
    return short_title(title or feature)[0]


def open_questions(doc: Document) -> list[tuple[Source, str]]:
    """Every `[NEEDS CLARIFICATION: …]` marker outside code and the template's example."""
    found = []
    example = _template_example(doc)
    for index in range(doc.body_start, len(doc.lines)):
        if doc.fenced[index] or index in example:
            continue
        for match in CLARIFICATION.finditer(doc.lines[index]):
            question = match.group("question")
            if question and question.lower() != TEMPLATE_QUESTION:
                found.append((doc.source(index), question))
    return found


def _template_example(doc: Document) -> set[int]:
    """Lines of the template's example list that some files keep (`*Example of marking …*`)."""
    lines: set[int] = set()
    for index, line in enumerate(doc.lines):
        if TEMPLATE_EXAMPLE.match(line):
            end = index + 1
            while end < len(doc.lines) and doc.lines[end].strip():
                end += 1
            lines.update(range(index + 1, end))
    return lines


def _requirements(doc: Document) -> list[_Candidate]:
    in_acceptance = _acceptance_criteria_lines(doc)
    example = _template_example(doc)
    found = []
    for index in range(doc.body_start, len(doc.lines)):
        if doc.fenced[index]:
            continue
        line = doc.lines[index]
        match = KEY_LINE.match(line) or PLAIN_KEY_LINE.match(line)
        if match is None and index in in_acceptance:
            match = ANY_KEY_LINE.match(line)
            if match and match.group("key").lower() in SCENARIO_WORDS:
                match = None
        if match:
            found.append(_keyed_item(doc, index, match))
            if index in example:
                found[-1].skip = "the template's example, left in the file"
    return found


def _acceptance_criteria_lines(doc: Document) -> set[int]:
    lines: set[int] = set()
    for heading in doc.headings:
        if heading.text.strip().rstrip(":").lower() == "acceptance criteria":
            lines.update(range(heading.index + 1, doc.section_end(heading)))
    return lines


def _is_key_line(line: str) -> bool:
    return bool(KEY_LINE.match(line) or PLAIN_KEY_LINE.match(line))


def _keyed_item(doc: Document, index: int, match: re.Match) -> _Candidate:
    continuation, _ = item_continuation(doc, index, len(match.group("indent")), _is_key_line)
    rest = SEPARATOR.sub("", match.group("rest"), count=1)
    text = item_text(rest, continuation)
    removed = bool(match.groupdict().get("strike")) or bool(REMOVED.match(text))
    return _Candidate(match.group("key"), text, index, "marked removed" if removed else None)


def _scenarios(doc: Document, parsed: Parsed) -> list[_Candidate]:
    found: list[_Candidate] = []
    stories = [(h, STORY.match(h.text)) for h in doc.headings]
    story_ranges = []
    for heading, match in stories:
        if match is None:
            continue
        end = doc.section_end(heading)
        story_ranges.append(range(heading.index, end))
        title = (match.group("title") or "").strip()
        context = f" (User Story {match.group('n')}: {title})" if title else ""
        label = _label_index(doc, heading.index + 1, end)
        if label is not None:
            prefix = f"US{match.group('n')}-AS"
            found += _scenario_list(doc, label + 1, end, prefix, context, parsed)
    for heading in doc.headings:
        if SCENARIOS_LABEL.match(heading.text) and not any(
            heading.index in r for r in story_ranges
        ):
            found += _scenario_list(
                doc, heading.index + 1, doc.section_end(heading), "AS", "", parsed
            )
    return found


def _label_index(doc: Document, start: int, end: int) -> int | None:
    for index in range(start, end):
        if not doc.fenced[index] and SCENARIOS_LABEL.match(doc.lines[index]):
            return index
    return None


def _scenario_list(
    doc: Document, start: int, end: int, prefix: str, context: str, parsed: Parsed
) -> list[_Candidate]:
    subsections = [
        (heading, match)
        for heading in doc.headings
        if start <= heading.index < end and (match := SCENARIO_HEADING.match(heading.text))
    ]
    if subsections:
        return _scenario_sections(doc, subsections, prefix, context, parsed)
    items: list[tuple[int | None, _Candidate]] = []
    index = _skip_comments(doc, start, end)
    while index < end:
        line = doc.lines[index]
        if doc.fenced[index] or not line.strip():
            index = _skip_comments(doc, index + 1, end)
            continue
        match = NUMBERED.match(line) or BULLET.match(line)
        if match is None or match.group("indent"):
            break
        first = index
        continuation, index = item_continuation(doc, first, 0)
        text = item_text(match.group("text"), continuation)
        number = int(match.group("n")) if match.re is NUMBERED else None
        items.append((number, _scenario(text, context, first)))
    return _number_scenarios(doc, items, prefix, parsed)


def _scenario_sections(
    doc: Document, subsections: list, prefix: str, context: str, parsed: Parsed
) -> list[_Candidate]:
    """Scenarios written as `#### Scenario 1: Title` headings over a list of steps."""
    items: list[tuple[int | None, _Candidate]] = []
    for heading, match in subsections:
        text = join_block([match.group("title"), "", doc.section_text(heading)])
        items.append((int(match.group("n")), _scenario(text, context, heading.index)))
    return _number_scenarios(doc, items, prefix, parsed)


def _scenario(text: str, context: str, index: int) -> _Candidate:
    if REMOVED.match(text):
        return _Candidate("", text, index, "marked removed")
    return _Candidate("", text + context if text else "", index)


def _skip_comments(doc: Document, index: int, end: int) -> int:
    """The first index from `index` that is not inside an HTML comment (templates leave some)."""
    while index < end and doc.lines[index].lstrip().startswith("<!--"):
        while index < end and "-->" not in doc.lines[index]:
            index += 1
        index += 1
    return index


def _number_scenarios(
    doc: Document, items: list[tuple[int | None, _Candidate]], prefix: str, parsed: Parsed
) -> list[_Candidate]:
    numbers = [number for number, _ in items]
    written = all(n is not None for n in numbers) and all(a < b for a, b in pairwise(numbers))
    if items and not written and any(n is not None for n in numbers):
        parsed.notices.append(
            Notice(
                doc.source(items[0][1].index),
                f"scenario numbers {numbers} do not increase; {prefix}1… follow their order",
            )
        )
    for position, (number, candidate) in enumerate(items, start=1):
        candidate.key = f"{prefix}{number if written else position}"
    return [candidate for _, candidate in items]


# --- write --------------------------------------------------------------------------------


def write_spec(spec: SpecDoc) -> str:
    """A spec-kit spec.md for `spec`; `parse` of it gives back the same criterion keys and texts.

    User story scenarios (`US1-AS2`) go under their story (stories in the order the criteria
    first name them, the title taken from the text's ` (User Story N: Title)`), older-template
    scenarios (`AS1`)
    under `### Acceptance Scenarios`, FR keys under `### Functional Requirements`, SC keys under
    `## Success Criteria` and every other key under `### Acceptance Criteria`. Open questions
    come back as `[NEEDS CLARIFICATION: …]` markers.
    """
    stories: dict[int, list[tuple[int, str, str]]] = {}
    scenarios: list[tuple[int, str]] = []
    groups: dict[str, list[CriterionDoc]] = {"FR": [], "SC": [], "other": []}
    for criterion in spec.criteria:
        story = re.fullmatch(r"US(\d+)-AS(\d+)", criterion.key)
        plain = re.fullmatch(r"AS(\d+)", criterion.key)
        if story:
            number, scenario, title = _story_parts(int(story.group(1)), criterion.text)
            stories.setdefault(number, []).append((int(story.group(2)), scenario, title))
        elif plain:
            scenarios.append((int(plain.group(1)), criterion.text))
        else:
            groups[_group(criterion.key)].append(criterion)
    lines = [f"# Feature Specification: {spec.title}", ""]
    lines += _write_scenarios(stories, scenarios)
    lines += _write_keyed("## Requirements", "### Functional Requirements", groups["FR"])
    lines += _write_keyed(
        "## Requirements" if not groups["FR"] else "", "### Acceptance Criteria", groups["other"]
    )
    lines += _write_keyed("## Success Criteria", "", groups["SC"])
    if spec.open_questions:
        lines += ["## Clarifications", ""]
        lines += [f"- [NEEDS CLARIFICATION: {question}]" for _, question in spec.open_questions]
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def _story_parts(number: int, text: str) -> tuple[int, str, str]:
    match = STORY_SUFFIX.match(text)
    if match and int(match.group("n")) == number:
        return number, match.group("scenario"), match.group("title")
    return number, text, ""


def _group(key: str) -> str:
    if re.fullmatch(KEY, key) and key.startswith(("FR-", "SC-")):
        return key[:2]
    return "other"


def _write_scenarios(
    stories: dict[int, list[tuple[int, str, str]]], scenarios: list[tuple[int, str]]
) -> list[str]:
    if not stories and not scenarios:
        return []
    lines = ["## User Scenarios & Testing", ""]
    for number in stories:
        items = sorted(stories[number])
        title = next((title for _, _, title in items if title), "")
        lines += [f"### User Story {number} - {title}" if title else f"### User Story {number}", ""]
        lines += ["**Acceptance Scenarios**:", ""]
        lines += [line for k, scenario, _ in items for line in _item(f"{k}. ", scenario)]
        lines.append("")
    if scenarios:
        lines += ["### Acceptance Scenarios", ""]
        lines += [line for k, text in sorted(scenarios) for line in _item(f"{k}. ", text)]
        lines.append("")
    return lines


def _write_keyed(section: str, subsection: str, criteria: list[CriterionDoc]) -> list[str]:
    if not criteria:
        return []
    lines = [section, ""] if section else []
    lines += [subsection, ""] if subsection else []
    lines += [line for c in criteria for line in _item(f"- **{c.key}**: ", c.text)]
    return [*lines, ""]


def _item(marker: str, text: str) -> list[str]:
    """A list item whose continuation lines are indented four spaces, so none reads as a heading."""
    first, *rest = text.split("\n")
    return [marker + first, *(f"    {line}" if line.strip() else "" for line in rest)]
