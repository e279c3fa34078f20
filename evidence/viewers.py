"""Turn evidence files into something a reviewer can read, safely.

Evidence is hostile until proven otherwise: every string that reaches a page is
escaped here or by the template engine, XML is parsed with defusedxml, and only the
first (or, for logs, last) ``LIMIT_BYTES`` of a file are read and rendered; a JUnit
table lists at most ``JUNIT_ROWS`` tests. A file larger than
``FACTORY_INLINE_MAX_BYTES`` is not rendered at all (``inline``): the page links to
its download instead.
"""

import functools
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.html import escape
from django.utils.safestring import mark_safe
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import TextLexer, get_lexer_for_filename
from pygments.util import ClassNotFound

from evidence import storage
from evidence.gates import test_ids
from evidence.models import Evidence, Kind
from evidence.parsers import junit_cases, parse_diff, without_offsets
from projects.diffs import Matcher

LIMIT_BYTES = 512 * 1024
LOG_TAIL_LINES = 400
JUNIT_ROWS = 500  # tests listed in a JUnit table, failures first; the rest are counted

ANSI = re.compile(r"\x1b\[([0-9;]*)m")
OTHER_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-ln-z]|\x1b\][^\x07]*\x07|\x1b[()][A-Z0-9]")


def inline(evidence) -> bool:
    """Whether a page may render this file; past ``FACTORY_INLINE_MAX_BYTES`` it links to it."""
    return evidence.size <= settings.FACTORY_INLINE_MAX_BYTES


def read_head(evidence, limit: int = LIMIT_BYTES) -> tuple[bytes, bool]:
    """The first ``limit`` bytes of an evidence file, and whether it was cut."""
    with storage.open_blob(evidence.file.name) as handle:
        data = handle.read(limit + 1)
    return data[:limit], len(data) > limit


def read_tail(evidence, limit: int = LIMIT_BYTES) -> tuple[bytes, bool]:
    with storage.open_blob(evidence.file.name) as handle:
        size = evidence.size
        if size > limit:
            handle.seek(size - limit)
        return handle.read(), size > limit


# --- ANSI logs ----------------------------------------------------------------------------


def _sgr_classes(params: str, classes: set[str]) -> set[str]:
    """Apply one SGR sequence's parameters to the set of CSS classes in force."""
    codes = (params or "0").split(";")
    colours = {c for c in classes if c.startswith(("ansi-3", "ansi-9"))}
    index = 0
    while index < len(codes):
        code = codes[index]
        if code in ("38", "48"):
            # Extended colour: 5;n or 2;r;g;b follow. They are values, not codes.
            index += 3 if codes[index + 1 : index + 2] == ["5"] else 5
            continue
        if code in ("", "0"):
            classes = set()
        elif code == "1":
            classes = classes | {"ansi-bold"}
        elif code == "22":
            classes = classes - {"ansi-bold"}
        elif code == "39":
            classes = classes - colours
        elif code.isdigit() and (30 <= int(code) <= 37 or 90 <= int(code) <= 97):
            classes = (classes - colours) | {f"ansi-{code}"}
        colours = {c for c in classes if c.startswith(("ansi-3", "ansi-9"))}
        index += 1
    return classes


def ansi_to_html(text: str) -> str:
    """Escape ``text`` and turn ANSI colour codes (SGR) into spans; drop other escapes."""
    text = OTHER_ESCAPES.sub("", text)
    out, classes, position, open_span = [], set(), 0, False
    for match in ANSI.finditer(text):
        out.append(escape(text[position : match.start()]))
        position = match.end()
        classes = _sgr_classes(match.group(1), classes)
        if open_span:
            out.append("</span>")
            open_span = False
        if classes:
            out.append(f'<span class="{" ".join(sorted(classes))}">')
            open_span = True
    out.append(escape(text[position:]))
    if open_span:
        out.append("</span>")
    return "".join(out)


# XML cannot carry ESC, so pytest's junitxml writes it as the text "#x1B".
ESCAPED_ESCAPES = re.compile(r"#x1[Bb]\[[0-9;?]*[A-Za-z]")


def strip_ansi(text: str) -> str:
    """Remove colour and cursor codes, real or written into XML as "#x1B[…"."""
    return ESCAPED_ESCAPES.sub("", OTHER_ESCAPES.sub("", ANSI.sub("", text)))


@dataclass
class LogView:
    html: str
    cut: bool
    lines: int


def log_view(evidence, tail_lines: int = LOG_TAIL_LINES) -> LogView:
    """The end of a log (where failures are), with its colours."""
    data, cut = read_tail(evidence)
    lines = data.decode("utf-8", errors="replace").splitlines()
    if len(lines) > tail_lines:
        lines, cut = lines[-tail_lines:], True
    return LogView(mark_safe(ansi_to_html("\n".join(lines))), cut, len(lines))  # escaped above


# --- JUnit ---------------------------------------------------------------------------------


@dataclass
class JUnitRow:
    test: str
    outcome: str
    time: float
    message: str  # the failure's one-line message
    details: str = ""  # its body: the traceback or output


@dataclass
class JUnitView:
    rows: list = field(default_factory=list)
    totals: dict = field(default_factory=dict)
    error: str = ""
    hidden: int = 0  # tests counted in the totals but not listed


ORDER = {"failed": 0, "error": 1, "skipped": 2, "passed": 3}


def junit_view(evidence) -> JUnitView:
    """The report's tests, failures and errors first, with their messages (plain text).

    The report is streamed; of each outcome the first ``JUNIT_ROWS`` tests (in report
    order) are kept, so a large report costs no more memory than a small one.
    """
    kept = {outcome: [] for outcome in ORDER}
    counts = dict.fromkeys(ORDER, 0)
    try:
        with storage.open_blob(evidence.file.name) as handle:
            for case in junit_cases(handle):
                counts[case.outcome] += 1
                if len(kept[case.outcome]) < JUNIT_ROWS:
                    kept[case.outcome].append(case)
    except ValidationError as exc:
        return JUnitView(error="; ".join(exc.messages))
    rows = []
    for outcome in ORDER:
        for case in kept[outcome]:
            message, details = strip_ansi(case.message), strip_ansi(case.details)
            rows.append(JUnitRow(test_ids(case)[0], outcome, case.time, message, details))
    rows.sort(key=lambda row: (ORDER[row.outcome], row.test))
    total = sum(counts.values())
    return JUnitView(
        rows=rows[:JUNIT_ROWS],
        totals={"tests": total, **counts},
        hidden=total - len(rows[:JUNIT_ROWS]),
    )


# --- Diffs ----------------------------------------------------------------------------------


@dataclass
class DiffLine:
    kind: str  # add, del, ctx, hunk
    old: int | None
    new: int | None
    html: str
    # Remarks the showing page hangs under this line (a task page's line comments).
    comments: list = field(default_factory=list)


@dataclass
class DiffFile:
    path: str
    status: str
    added: int
    removed: int
    lines: list = field(default_factory=list)


@dataclass
class DiffView:
    files: list = field(default_factory=list)
    cut: bool = False
    error: str = ""


FORMATTER = HtmlFormatter(nowrap=True)


def _lexer(path: str):
    return _lexer_for_suffix(PurePosixPath(path).suffix.lower() or PurePosixPath(path).name)


@functools.lru_cache(maxsize=256)
def _lexer_for_suffix(suffix: str):
    # Finding a lexer scans every Pygments lexer; do it once per file suffix.
    try:
        return get_lexer_for_filename(
            f"x{suffix}" if suffix.startswith(".") else suffix, stripnl=False, ensurenl=False
        )
    except ClassNotFound:
        return TextLexer(stripnl=False, ensurenl=False)


def _code(lexer, text: str) -> str:
    # Pygments escapes what it emits; the result is safe HTML.
    return highlight(text, lexer, FORMATTER).rstrip("\n")


HUNK_HEADER = re.compile(rb"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@(.*)$")


def _close_last_hunk(data: bytes) -> bytes:
    """Make a diff cut at a line boundary parse: the last hunk's header says how many
    lines it has, so give it the counts of the lines that are really there."""
    start = data.rfind(b"\n@@ ") + 1
    header_end = data.find(b"\n", start)
    match = HUNK_HEADER.match(data[start:header_end]) if header_end > start else None
    if match is None:
        return data
    old = new = 0
    for line in data[header_end + 1 :].splitlines():
        marker = line[:1]
        if marker in (b" ", b""):
            old, new = old + 1, new + 1
        elif marker == b"-":
            old += 1
        elif marker == b"+":
            new += 1
    header = b"@@ -%s,%d +%s,%d @@%s" % (match.group(1), old, match.group(2), new, match.group(3))
    return data[:start] + header + data[header_end:]


def _diff_head(evidence):
    """The diff's files as far as the page shows them: ``(PatchSet, cut)``."""
    data, cut = read_head(evidence)
    if cut:
        # Show whole files up to the cut; a single file too large for it, its start.
        last_file = data.rfind(b"\ndiff --git ")
        if last_file > 0:
            data = data[: last_file + 1]
        else:
            data = _close_last_hunk(data[: data.rfind(b"\n") + 1])
    return parse_diff(data), cut


@dataclass
class FileLines:
    """The lines a diff shows of one file, by number on each side, and those it changes."""

    new: dict = field(default_factory=dict)  # target line number → text (added or context)
    old: dict = field(default_factory=dict)  # source line number → text (removed or context)
    added: set = field(default_factory=set)
    removed: set = field(default_factory=set)


def diff_lines(evidence) -> dict[str, FileLines]:
    """For each file of the diff as the page shows it, which lines a comment may name
    and which lines the diff changes. ``ValidationError`` if it is not a diff."""
    patch, _ = _diff_head(evidence)
    files = {}
    for patched in patch:
        lines = files.setdefault(patched.path, FileLines())
        for hunk in patched:
            for line in hunk:
                text = line.value.rstrip("\n")
                if line.target_line_no:
                    lines.new[line.target_line_no] = text
                    if line.is_added:
                        lines.added.add(line.target_line_no)
                if line.source_line_no:
                    lines.old[line.source_line_no] = text
                    if line.is_removed:
                        lines.removed.add(line.source_line_no)
    return files


def diff_view(evidence) -> DiffView:
    """Each file of a unified diff, its lines highlighted for the file's language."""
    try:
        patch, cut = _diff_head(evidence)
    except ValidationError as exc:
        return DiffView(error="; ".join(exc.messages))
    files = []
    for patched in patch:
        lexer = _lexer(patched.path)
        status = (
            "added"
            if patched.is_added_file
            else "removed"
            if patched.is_removed_file
            else "modified"
        )
        item = DiffFile(patched.path, status, patched.added, patched.removed)
        for hunk in patched:
            header = f"@@ -{hunk.source_start},{hunk.source_length} +{hunk.target_start},{hunk.target_length} @@ {hunk.section_header}"
            item.lines.append(DiffLine("hunk", None, None, escape(header)))
            for line in hunk:
                kind = "add" if line.is_added else "del" if line.is_removed else "ctx"
                html = mark_safe(_code(lexer, line.value.rstrip("\n")))  # Pygments escapes
                item.lines.append(DiffLine(kind, line.source_line_no, line.target_line_no, html))
        files.append(item)
    return DiffView(files=files, cut=cut)


# --- What differs between two versions of a change (the review's interdiff) ---------------

INTERDIFF_ROWS = 2000  # rows of an interdiff a page shows; the rest are counted
TRAILING = re.compile(r"[ \t]+(?=\r?$)")


@dataclass
class Interdiff:
    """A diff of two diffs, as Gerrit shows between patch sets: ``rows`` are
    ``(kind, html)`` with kind ``del`` (only in the approved change), ``add`` (only in the
    new one), ``ctx`` or ``gap``; whitespace on changed rows is drawn visibly.
    ``whitespace_only``: every difference is in whitespace; ``same_text``: the two read
    alike as text (they can still differ in bytes that are not UTF-8, or in binary files,
    which the text diffs do not show)."""

    rows: list = field(default_factory=list)
    hidden: int = 0
    whitespace_only: bool = False
    same_text: bool = False
    too_large: bool = False


def _visible_whitespace(text: str) -> str:
    """``text`` escaped, with tabs, carriage returns and trailing spaces drawn."""
    body = TRAILING.sub(lambda m: m[0].replace(" ", "\0S").replace("\t", "\0T"), text)
    html = escape(body)
    for mark, drawn in (("\0S", "·"), ("\t", "→\t"), ("\0T", "→\t"), ("\r", "CR")):
        html = html.replace(mark, f'<span class="ws">{drawn}</span>')
    return html


def interdiff_view(approved, current) -> Interdiff:
    """What differs between the diffs ``approved`` and ``current`` (evidence of kind
    diff), compared line by line as a rebase leaves them (``evidence.parsers.without_offsets``:
    line numbers in hunk headers and blob ids do not count), showing the lines as written.
    Either past what a page reads is ``too_large``: the page links to both instead."""
    if not (inline(approved) and inline(current)):
        return Interdiff(too_large=True)
    (before, cut_before), (after, cut_after) = read_head(approved), read_head(current)
    if cut_before or cut_after:
        return Interdiff(too_large=True)
    old, new = before.split(b"\n"), after.split(b"\n")
    matcher = Matcher(
        None,
        [without_offsets(line) for line in old],
        [without_offsets(line) for line in new],
        autojunk=False,
    )
    rows, removed, added = [], [], []
    for group in matcher.get_grouped_opcodes(3):
        rows.append(("gap", "…"))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                rows += [("ctx", escape(line.decode(errors="replace"))) for line in new[j1:j2]]
                continue
            for kind, lines, kept in (("del", old[i1:i2], removed), ("add", new[j1:j2], added)):
                for line in lines:
                    text = line.decode(errors="replace")
                    kept.append(text)
                    rows.append((kind, mark_safe(_visible_whitespace(text))))
    if not rows:
        return Interdiff(same_text=True)
    bare = re.compile(r"\s+")
    return Interdiff(
        rows=rows[:INTERDIFF_ROWS],
        hidden=max(len(rows) - INTERDIFF_ROWS, 0),
        whitespace_only=bare.sub("", "".join(removed)) == bare.sub("", "".join(added)),
    )


# --- Text -----------------------------------------------------------------------------------


def text_view(evidence) -> tuple[str, bool]:
    data, cut = read_head(evidence)
    return data.decode("utf-8", errors="replace"), cut


IMAGE_TYPES = {"png": "image/png", "jpeg": "image/jpeg", "gif": "image/gif", "webp": "image/webp"}


def image_type(evidence) -> str | None:
    """The media type to serve a screenshot as, from its checked magic bytes; None if not an image."""
    return (
        IMAGE_TYPES.get(evidence.summary.get("format")) if evidence.kind == "screenshot" else None
    )


# --- What a page shows of each item ------------------------------------------------------

# How many items of each kind a task page renders inline; the rest are links.
INLINE_VIEWERS = {Kind.JUNIT: 3, Kind.DIFF: 2, Kind.LOG: 2, Kind.SCREENSHOT: 6, Kind.NOTE: 6}


def page_viewers(evidence: list[Evidence]) -> list[dict]:
    """Inline viewers for the first few items of each kind; the rest are links."""
    shown, out = {}, []
    for item in evidence:
        cap = INLINE_VIEWERS.get(item.kind, 0)
        if shown.get(item.kind, 0) >= cap:
            continue
        shown[item.kind] = shown.get(item.kind, 0) + 1
        out.append(page_viewer(item))
    return out


def page_viewer(item: Evidence) -> dict:
    # Open what a reviewer reads first: the change, the pictures, failing tests.
    failing = item.kind == Kind.JUNIT and (item.summary.get("failed") or item.summary.get("error"))
    opened = item.kind in (Kind.DIFF, Kind.SCREENSHOT) or failing
    view = {"evidence": item, "kind": item.kind, "open": "open" if opened else ""}
    if not inline(item):
        # Past FACTORY_INLINE_MAX_BYTES nothing is read for the page: it links to the file.
        view["too_large"] = True
    elif item.kind == Kind.JUNIT:
        view["junit"] = junit_view(item)
    elif item.kind == Kind.DIFF:
        view["diff"] = diff_view(item)
    elif item.kind == Kind.LOG:
        view["log"] = log_view(item)
    elif item.kind == Kind.SCREENSHOT:
        view["image"] = image_type(item) is not None
    else:
        view["text"], view["cut"] = text_view(item)
    return view
