"""Line-based Markdown reading shared by the format modules.

Every record an importer makes names the 1-based line it came from, so these helpers work on
lines, never on a rendered tree: a `Document` keeps the file's lines, which of them sit inside
fenced code (where nothing is structure), where YAML front matter ends, and its ATX headings.
List items are read with their continuation lines, the way a person reading the file would
group them.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from interop.documents import Skip, Source

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
LIST_MARKER = re.compile(r"^(\s*)(?:[-*+]|\d{1,9}[.)])(?:\s+|$)")
CHECKBOX = re.compile(r"^(?P<indent>\s*)[-*+]\s+\[(?P<mark>[ xX~/-])\]\s+(?P<rest>.*)$")
# The colon or dash between an item's key and its text (`FR-001: …`, `T001 - …`).
SEPARATOR = re.compile(r"^\s*[:\uff1a\-\u2013\u2014]\s*")
BLOCK_START = re.compile(r"^\s*(?:>|\||-{3,}\s*$|\*{3,}\s*$|_{3,}\s*$)")
TITLE_LENGTH = 200


@dataclass(frozen=True)
class Heading:
    """An ATX heading outside fenced code; `index` is its 0-based line index."""

    level: int
    text: str
    index: int

    @property
    def line(self) -> int:
        return self.index + 1


@dataclass
class Document:
    """A decoded Markdown file. `text` is the file with line endings made `\\n`."""

    path: str
    text: str
    lines: list[str]
    fenced: list[bool]
    body_start: int
    headings: list[Heading]

    @property
    def front_matter(self) -> str | None:
        """The YAML front matter between the opening and closing `---`, verbatim, if any."""
        if self.body_start == 0:
            return None
        return "\n".join(self.lines[1 : self.body_start - 1])

    def source(self, index: int = 0) -> Source:
        """The `Source` of the line at 0-based `index`."""
        return Source(self.path, index + 1)

    def section_end(self, heading: Heading) -> int:
        """Index of the first heading after `heading` at its level or above, or the line count."""
        for other in self.headings:
            if other.index > heading.index and other.level <= heading.level:
                return other.index
        return len(self.lines)

    def section_text(self, heading: Heading) -> str:
        """The Markdown under `heading` up to its section's end, without outer blank lines."""
        return join_block(self.lines[heading.index + 1 : self.section_end(heading)])

    def h1(self) -> Heading | None:
        """The first level-1 heading after the front matter."""
        return next((h for h in self.headings if h.level == 1), None)


def read(path: str, data: bytes) -> Document | Skip:
    """Decode `data` as UTF-8 (a byte-order mark is dropped) into a `Document`.

    A file that is not UTF-8 becomes a `Skip` naming the file and line 1.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        return Skip(
            Source(path, 1), f"not UTF-8 (at byte offset {error.start}); the file was not read"
        )
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    fenced = fenced_mask(lines)
    start = front_matter_end(lines)
    return Document(path, text, lines, fenced, start, headings(lines, fenced, start))


def fenced_mask(lines: list[str]) -> list[bool]:
    """For each line, whether it is a fence line or inside fenced code.

    A fence closes only with the same character, at least as long as the one that opened it;
    an unclosed fence runs to the end of the file, as CommonMark says.
    """
    mask: list[bool] = []
    opener: str | None = None
    for line in lines:
        match = FENCE.match(line)
        if opener is None:
            if match:
                opener = match.group(1)
            mask.append(opener is not None)
            continue
        mask.append(True)
        closes = match and match.group(1)[0] == opener[0] and len(match.group(1)) >= len(opener)
        if closes and not line.strip().lstrip(opener[0]):
            opener = None
    return mask


def front_matter_end(lines: list[str]) -> int:
    """Index of the first line after YAML front matter (`---` on line 1 to the next `---`), or 0."""
    if not lines or lines[0].strip() != "---":
        return 0
    for index in range(1, len(lines)):
        if lines[index].strip() in ("---", "..."):
            return index + 1
    return 0


def headings(lines: list[str], fenced: list[bool], start: int = 0) -> list[Heading]:
    """The ATX headings from line index `start` on, skipping fenced code."""
    found = []
    for index in range(start, len(lines)):
        if fenced[index]:
            continue
        match = HEADING.match(lines[index])
        if match:
            text = re.sub(r"[ \t]+#+$", "", match.group(2) or "").strip()
            found.append(Heading(len(match.group(1)), text, index))
    return found


def is_heading(line: str) -> bool:
    """Whether `line` is an ATX heading (up to three spaces of indentation)."""
    return HEADING.match(line) is not None


def indentation(line: str) -> int:
    """Leading whitespace width, a tab counting as four spaces."""
    width = 0
    for char in line:
        if char == " ":
            width += 1
        elif char == "\t":
            width += 4
        else:
            break
    return width


def join_block(lines: Iterable[str]) -> str:
    """`lines` joined with `\\n`, trailing spaces and outer blank lines removed."""
    return "\n".join(line.rstrip() for line in lines).strip("\n")


def item_continuation(
    doc: Document, index: int, indent: int, starts_item: Callable[[str], bool] | None = None
) -> tuple[list[str], int]:
    """The lines that continue the list item or paragraph starting at line `index`.

    A following line belongs to the item while it is indented deeper than `indent` (nested lists
    and wrapped text) or, right after a non-blank line, is a lazy continuation that starts no new
    block (list item, heading, table, quote, rule, or a line `starts_item` claims). Blank lines
    belong to it only when an indented line follows. Returns the lines, dedented together, and
    the index after the item.
    """
    taken: list[str] = []
    end = index + 1
    cursor = index + 1
    while cursor < len(doc.lines):
        line = doc.lines[cursor]
        if not line.strip():
            cursor += 1
            continue
        deeper = indentation(line) > indent
        blank_before = cursor > end
        if is_heading(line) and not (deeper and doc.fenced[cursor]):
            break
        if not deeper and (
            blank_before
            or doc.fenced[cursor]
            or LIST_MARKER.match(line)
            or BLOCK_START.match(line)
            or line.lstrip().startswith("**")
            or (starts_item is not None and starts_item(line))
        ):
            break
        taken.extend(doc.lines[end : cursor + 1])
        cursor += 1
        end = cursor
    return textwrap.dedent("\n".join(taken)).split("\n") if taken else [], end


def item_text(first: str, continuation: list[str]) -> str:
    """An item's text: its first non-blank line, stripped, then the lines after it dedented
    together, so a text written back with its later lines indented reads back the same."""
    lines = [first, *continuation]
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines:
        return ""
    rest = textwrap.dedent("\n".join(lines[1:])).split("\n")
    return join_block([lines[0].strip(), *rest])


def short_title(text: str) -> tuple[str, str]:
    """A title of at most 200 characters for `text`, and the full text when it had to be cut."""
    line = " ".join(text.split())
    if len(line) <= TITLE_LENGTH:
        return line, ""
    return line[: TITLE_LENGTH - 1].rstrip() + "…", text


def chain_groups(groups: list[list[str]]) -> dict[str, list[str]]:
    """Dependencies that make every member of a group wait for all of the group before it.

    `groups` holds external ids in file order; empty groups are passed over, so a group waits
    for the nearest earlier group that has members. Members of the first group wait for nothing.
    """
    depends: dict[str, list[str]] = {}
    previous: list[str] = []
    for group in groups:
        if not group:
            continue
        for member in group:
            depends[member] = list(previous)
        previous = group
    return depends
