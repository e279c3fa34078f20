"""Validate evidence files by kind and extract a small summary for people and agents.

Every parser here streams: memory stays bounded whatever the size of the file, so a
report may be as large as an upload may be (``FACTORY_MAX_UPLOAD_BYTES``). Only JSON
and link files are still read whole, up to ``FACTORY_MAX_PARSED_BYTES``. The upload
summary, the gates and the viewers read reports through the same parsers here: one
reading of a JUnit report (``junit_cases``), of a Cobertura root (``coverage_root``)
and of a diff (``diff_files``).

XML is parsed by defusedxml's expat SAX reader with DTDs forbidden, so entity bombs
and external entities are refused before expansion; a tag or comment longer than
``MAX_XML_TOKEN`` and nesting deeper than ``MAX_XML_DEPTH`` are refused too (expat
holds a tag whole before it reports it). A file that does not parse as its declared
kind is a ``ValidationError`` naming the problem; nothing is stored.
"""

import codecs
import json
import math
import re
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple
from urllib.parse import urlparse
from xml.sax import SAXException
from xml.sax.handler import ContentHandler

from defusedxml import DefusedXmlException
from defusedxml.expatreader import create_parser
from django.conf import settings
from django.core.exceptions import ValidationError
from unidiff import PatchSet
from unidiff.constants import (
    DEV_NULL,
    RE_BINARY_DIFF,
    RE_DIFF_GIT_DELETED_FILE,
    RE_DIFF_GIT_HEADER,
    RE_DIFF_GIT_HEADER_NO_PREFIX,
    RE_DIFF_GIT_HEADER_URI_LIKE,
    RE_DIFF_GIT_INDEX,
    RE_DIFF_GIT_NEW_FILE,
    RE_DIFF_GIT_NEW_MODE,
    RE_DIFF_GIT_OLD_MODE,
    RE_HUNK_HEADER,
    RE_NO_NEWLINE_MARKER,
    RE_PATCH_FILE_PREFIX,
    RE_SOURCE_FILENAME,
    RE_TARGET_FILENAME,
)
from unidiff.errors import UnidiffParseError

from projects.errors import TooLarge

MAX_LISTED = 50  # failing tests or changed files listed in a summary
MESSAGE_CHARS = 500
DETAILS_CHARS = 20_000  # of a failure's text, kept for the page
NAME_CHARS = 2_000  # of a test's classname, name or file
CHUNK = 64 * 1024  # bytes fed to a parser at a time
MAX_XML_TOKEN = 1024 * 1024  # expat holds a tag (or comment) whole: refuse longer ones
MAX_XML_DEPTH = 256  # and every open element: refuse deeper nesting


def _read(fileobj, kind: str) -> bytes:
    """The whole file, for the kinds parsed in memory (JSON, link), within the parse limit."""
    limit = settings.FACTORY_MAX_PARSED_BYTES
    if fileobj.size is not None and fileobj.size > limit:
        raise TooLarge(f"{kind} files over {limit} bytes are not accepted; upload it as a log")
    fileobj.seek(0)
    data = fileobj.read()
    fileobj.seek(0)
    return data


def _text(data: bytes, kind: str) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValidationError(
            {"file": f"a {kind} file must be UTF-8 text (invalid byte at offset {exc.start})"}
        ) from exc
    if "\x00" in text:
        raise ValidationError({"file": f"a {kind} file must be text; this one has NUL bytes"})
    return text


# --- XML --------------------------------------------------------------------------------------


class _Events(ContentHandler):
    """Counts what expat reported (``_sax_feed`` notices a chunk that reported nothing)."""

    events = 0

    def characters(self, content):
        self.events += 1

    def ignorableWhitespace(self, whitespace):
        self.events += 1

    def processingInstruction(self, target, data):
        self.events += 1


def _too_deep():
    return ValidationError({"file": f"the XML nests elements deeper than {MAX_XML_DEPTH} levels"})


def _sax_feed(fileobj, handler: _Events, kind: str) -> Iterator[None]:
    """Feed ``fileobj`` to a defused expat reader a chunk at a time; yield after each chunk.

    Text arrives in pieces as it is read; a tag does not, so input that goes on for
    ``MAX_XML_TOKEN`` bytes without a single event is refused rather than held.
    """
    parser = create_parser(forbid_dtd=True)
    parser.setContentHandler(handler)
    quiet = 0
    try:
        fileobj.seek(0)
        while chunk := fileobj.read(CHUNK):
            seen = handler.events
            parser.feed(chunk)
            quiet = 0 if handler.events != seen else quiet + len(chunk)
            if quiet > MAX_XML_TOKEN:
                raise ValidationError(
                    {
                        "file": f"the {kind} file has a tag or comment longer than {MAX_XML_TOKEN} bytes"
                    }
                )
            yield
        parser.close()
    except DefusedXmlException as exc:
        raise ValidationError(
            {"file": f"the {kind} file declares a DTD or entities, which are refused ({exc})"}
        ) from exc
    except SAXException as exc:
        raise ValidationError({"file": f"the {kind} file is not well-formed XML: {exc}"}) from exc


COLOUR_CODES = re.compile(r"(?:\x1b|#x1[Bb])\[[0-9;?]*[A-Za-z]")


def strip_colours(text: str) -> str:
    """Terminal colour codes out of a message (pytest's junitxml writes ESC as "#x1B")."""
    return COLOUR_CODES.sub("", text)


class Case(NamedTuple):
    """One test case of a JUnit report: what a summary, a gate and a page need of it.

    ``outcome`` comes from the case's first ``<failure>``, ``<error>`` or ``<skipped>``
    (none: passed); ``message`` is that result's message attribute and ``details`` its
    text, colour codes removed and cut to ``MESSAGE_CHARS`` and ``DETAILS_CHARS``.
    """

    classname: str
    name: str
    file: str
    outcome: str
    message: str = ""
    details: str = ""
    time: float = 0.0

    @property
    def reason(self) -> str:
        """The one line a summary or verdict shows: the message, else the text's start."""
        return (self.message or self.details)[:MESSAGE_CHARS]


RESULTS = {"failure": "failed", "error": "error", "skipped": "skipped"}
KEPT_CHARS = DETAILS_CHARS + 1024  # of a result's raw text: room for colour codes and blanks


def _seconds(value) -> float:
    """A test's time; a report may say anything there ("soon"), which reads as 0."""
    try:
        seconds = float(value or 0)
    except ValueError:
        return 0.0
    return seconds if math.isfinite(seconds) else 0.0


def _clean(text: str, limit: int) -> str:
    return strip_colours(text.strip())[:limit] if text else ""


class _JUnitHandler(_Events):
    """Builds a ``Case`` as each ``</testcase>`` closes, keeping nothing else.

    The cases counted are those junitparser counted: the children of a ``<testsuite>``
    under the root ``<testsuites>`` (or the root ``<testsuite>``), suites nested in
    suites included. Called once per element of reports with millions of them, so it
    is written for speed.
    """

    def __init__(self):
        super().__init__()
        self.stack = []  # per open element: "suite", "suites", "case", "result" or ""
        self.cases = []  # built since the last take()
        self.case = None  # [classname, name, file, outcome, message, text, time]
        self.text = None  # the first result's text, while it is being read

    def startElement(self, name, attrs):
        self.events += 1
        stack = self.stack
        parent = stack[-1] if stack else None
        if name == "testcase" and parent == "suite":
            get = attrs.get
            self.case = [
                get("classname") or "",
                get("name") or "",
                get("file") or "",
                "passed",
                "",
                "",
                get("time"),
            ]
            stack.append("case")
            return
        if len(stack) >= MAX_XML_DEPTH:
            raise _too_deep()
        role = ""
        if parent is None:
            if name not in ("testsuites", "testsuite"):
                raise ValidationError(
                    {
                        "file": "not a JUnit report: the root element must be <testsuites> or <testsuite>"
                    }
                )
            role = "suites" if name == "testsuites" else "suite"
        elif name == "testsuite" and parent in ("suites", "suite"):
            role = "suite"
        elif self.case is not None and name in RESULTS and self.case[3] == "passed":
            role = "result"
            self.case[3] = RESULTS[name]
            self.case[4] = (attrs.get("message") or "")[:KEPT_CHARS]
            self.text, self.kept = [], 0
        stack.append(role)

    def characters(self, content):
        self.events += 1
        if self.text is not None and self.kept < KEPT_CHARS:
            self.text.append(content[: KEPT_CHARS - self.kept])
            self.kept += len(self.text[-1])

    def endElement(self, name):
        self.events += 1
        role = self.stack.pop()
        if role == "case":
            classname, name, file, outcome, message, text, time = self.case
            self.case = None
            self.cases.append(
                Case(
                    classname[:NAME_CHARS],
                    name[:NAME_CHARS],
                    file[:NAME_CHARS],
                    outcome,
                    _clean(message, MESSAGE_CHARS),
                    _clean(text, DETAILS_CHARS),
                    _seconds(time),
                )
            )
        elif role == "result":
            self.case[5] = "".join(self.text)
            self.text = None

    def take(self) -> list[Case]:
        cases, self.cases = self.cases, []
        return cases


def junit_cases(fileobj) -> Iterator[Case]:
    """Every test case of a JUnit report, in document order, read a chunk at a time.

    Raises ``ValidationError`` for a file that is not a JUnit report — possibly after
    some cases were yielded, so a caller trusts its totals only once the loop ends.
    """
    handler = _JUnitHandler()
    for _ in _sax_feed(fileobj, handler, "junit"):
        yield from handler.take()
    yield from handler.take()


def summarize_junit(fileobj) -> dict:
    totals = {"tests": 0, "passed": 0, "failed": 0, "error": 0, "skipped": 0}
    failures = []
    for case in junit_cases(fileobj):
        totals["tests"] += 1
        totals[case.outcome] += 1
        if case.outcome in ("failed", "error") and len(failures) < MAX_LISTED:
            failures.append(
                {
                    "test": f"{case.classname}::{case.name}",
                    "outcome": case.outcome,
                    "message": case.reason,
                }
            )
    return {**totals, "failures": failures}


class _RootFound(Exception):
    """Raised at the root's start tag: the parse has what it came for."""


class _RootHandler(_Events):
    root = None

    def startElement(self, name, attrs):
        self.root = (name, dict(attrs.items()))
        raise _RootFound


def coverage_root(fileobj) -> dict:
    """The attributes of a Cobertura report's root element; the rest is never read.

    Only the root's totals decide anything, so parsing stops at its start tag.
    """
    handler = _RootHandler()
    try:
        for _ in _sax_feed(fileobj, handler, "coverage"):
            pass
    except _RootFound:
        name, attrs = handler.root
        if name == "coverage" and attrs.get("line-rate") is not None:
            return attrs
    raise ValidationError(
        {"file": "not a Cobertura report: expected <coverage line-rate=…> as the root"}
    )


def summarize_coverage(fileobj) -> dict:
    root = coverage_root(fileobj)
    try:
        line_rate = float(root.get("line-rate"))
        branch_rate = float(root.get("branch-rate") or 0)
        lines_valid = int(root.get("lines-valid") or 0)
        lines_covered = int(root.get("lines-covered") or 0)
    except ValueError as exc:
        raise ValidationError(
            {"file": f"the Cobertura report has a malformed number: {exc}"}
        ) from exc
    if not 0 <= line_rate <= 1:
        raise ValidationError({"file": "line-rate must lie between 0 and 1"})
    return {
        "line_rate": line_rate,
        "branch_rate": branch_rate,
        "lines_valid": lines_valid,
        "lines_covered": lines_covered,
    }


# --- Diffs ------------------------------------------------------------------------------------


@dataclass(slots=True)
class ChangedFile:
    """One file of a unified diff, with its counts but none of its lines.

    ``source_file``, ``target_file``, ``path``, ``is_added_file`` and ``is_removed_file``
    mean what they mean on unidiff's ``PatchedFile``.
    """

    source_file: str
    target_file: str
    added: int = 0
    removed: int = 0
    hunks: int = 0
    first_hunk: tuple = ()  # (source start, source length, target start, target length)
    is_binary_file: bool = False

    @property
    def is_rename(self) -> bool:
        return (
            DEV_NULL not in (self.source_file, self.target_file)
            and self.source_file[2:] != self.target_file[2:]
        )

    @property
    def path(self) -> str:
        path = self.source_file
        if path in (None, DEV_NULL) or (self.is_rename and self.target_file != DEV_NULL):
            path = self.target_file
        quoted = path.startswith('"') and path.endswith('"')
        if quoted:
            path = path[1:-1]
        if RE_PATCH_FILE_PREFIX.match(path):
            path = path[2:]
        return f'"{path}"' if quoted else path

    @property
    def is_added_file(self) -> bool:
        return self.source_file == DEV_NULL or (self.hunks == 1 and self.first_hunk[:2] == (0, 0))

    @property
    def is_removed_file(self) -> bool:
        return self.target_file == DEV_NULL or (self.hunks == 1 and self.first_hunk[2:] == (0, 0))

    @property
    def status(self) -> str:
        return "added" if self.is_added_file else "removed" if self.is_removed_file else "modified"


def _diff_lines(fileobj) -> Iterator[str]:
    """Each line of a diff as text, read a piece at a time; refuses bytes that are not UTF-8.

    A line longer than a piece yields its first piece only: a diff line is told by
    its first characters, and its paths are never that long.
    """
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset, line_start = 0, True
    fileobj.seek(0)
    while piece := fileobj.readline(CHUNK):
        if b"\x00" in piece:
            raise ValidationError({"file": "a diff file must be text; this one has NUL bytes"})
        try:
            text = decoder.decode(piece)
        except UnicodeDecodeError as exc:
            raise ValidationError(
                {
                    "file": f"a diff file must be UTF-8 text (invalid byte at offset {offset + exc.start})"
                }
            ) from exc
        offset += len(piece)
        if line_start:
            yield text
        line_start = piece.endswith(b"\n")
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as exc:
        raise ValidationError(
            {"file": f"a diff file must be UTF-8 text (invalid byte at offset {offset})"}
        ) from exc


def _read_hunk(current: ChangedFile, header: re.Match, lines: Iterator[str]) -> None:
    """Count one hunk's lines against its header, as unidiff does with ``metadata_only``."""
    source_start, source_length, target_start, target_length = (
        int(header.group(1)),
        int(header.group(2) or 1),
        int(header.group(3)),
        int(header.group(4) or 1),
    )
    source = target = 0
    for line in lines:
        marker = line[:1]
        if marker in ("", "\r", "\n"):
            marker = " "
        if marker == "+":
            target += 1
            current.added += 1
        elif marker == "-":
            source += 1
            current.removed += 1
        elif marker == " ":
            source, target = source + 1, target + 1
        elif marker != "\\":
            raise UnidiffParseError(f"Hunk diff line expected: {line[:200]}")
        if source > source_length or target > target_length:
            raise UnidiffParseError("Hunk is longer than expected")
        if (source, target) == (source_length, target_length):
            break
    if source < source_length or target < target_length:
        raise UnidiffParseError("Hunk is shorter than expected")
    if not current.hunks:
        current.first_hunk = (source_start, source_length, target_start, target_length)
    current.hunks += 1


def _changed_files(lines: Iterator[str]) -> Iterator[ChangedFile]:
    """unidiff's ``PatchSet._parse``, keeping one file at a time and no lines.

    ``header`` is unidiff's "patch_info is not None": inside a ``diff --git`` header
    block, or among lines that belong to no file (a commit message, say).
    """
    current, header, source = None, False, None
    for line in lines:
        git = (
            RE_DIFF_GIT_HEADER.match(line)
            or RE_DIFF_GIT_HEADER_URI_LIKE.match(line)
            or RE_DIFF_GIT_HEADER_NO_PREFIX.match(line)
        )
        if git:
            if current is not None:
                yield current
            current, header = ChangedFile(git.group("source"), git.group("target")), True
            continue
        if RE_DIFF_GIT_NEW_FILE.match(line) or RE_DIFF_GIT_DELETED_FILE.match(line):
            if current is None or not header:
                raise UnidiffParseError(f"Unexpected new or deleted file found: {line[:200]}")
            if line.startswith("new"):
                current.source_file = DEV_NULL
            else:
                current.target_file = DEV_NULL
            continue
        git_info = (RE_DIFF_GIT_OLD_MODE, RE_DIFF_GIT_NEW_MODE, RE_DIFF_GIT_INDEX)
        if current is not None and header and any(p.match(line) for p in git_info):
            continue
        if match := RE_SOURCE_FILENAME.match(line):
            source = match.group("filename")
            if current is not None and not header:
                yield current
                current = None
            continue
        if match := RE_TARGET_FILENAME.match(line):
            target = match.group("filename")
            if current is not None and current.target_file != target:
                raise UnidiffParseError(f"Target without source: {line[:200]}")
            if current is None:
                if source is None:
                    raise UnidiffParseError(f"Target without source: {line[:200]}")
                current, header, source = ChangedFile(source, target), False, None
            continue
        if match := RE_HUNK_HEADER.match(line):
            header = False
            if current is None:
                raise UnidiffParseError(f"Unexpected hunk found: {line[:200]}")
            _read_hunk(current, match, lines)
            continue
        if RE_NO_NEWLINE_MARKER.match(line):
            if current is None or not current.hunks:
                raise UnidiffParseError(f"Unexpected marker: {line[:200]}")
            continue
        if line == "\n" and current is not None and current.hunks:
            continue  # an empty line after a hunk
        if not header:
            if current is not None:
                yield current
            current, header = None, True
        if match := RE_BINARY_DIFF.match(line):
            if current is None:
                source_name = match.group("source_filename")
                current = ChangedFile(source_name, match.group("target_filename") or source_name)
            current.is_binary_file = True
            yield current
            current, header = None, False
        elif line == "GIT binary patch\n":
            if current is None:
                raise UnidiffParseError(f"Unexpected binary patch marker: {line[:200]}")
            current.is_binary_file = True
            yield current
            current, header = None, False
    if current is not None:
        yield current


def diff_files(fileobj) -> Iterator[ChangedFile]:
    """Every file a unified diff changes, streamed line by line with bounded memory.

    Raises ``ValidationError`` for a file that is not a unified diff (possibly after
    some files were yielded) or that changes no file.
    """
    count = 0
    try:
        for changed in _changed_files(_diff_lines(fileobj)):
            count += 1
            yield changed
    except UnidiffParseError as exc:
        raise ValidationError({"file": f"not a unified diff: {exc}"}) from exc
    if not count:
        raise ValidationError({"file": "the diff changes no file"})


def diff_paths(files: Iterable) -> list[str]:
    """Every repository path a diff touches (both sides of a rename), each once."""
    paths = {}
    for changed in files:
        for path in (changed.source_file, changed.target_file):
            if path and path != DEV_NULL:
                paths[path[2:] if path[:2] in ("a/", "b/") else path] = None
    return list(paths)


# What a rebase moves without changing the change: a hunk header's line numbers and the
# enclosing line git prints after it (which names the nearest line above the hunk that
# looks like a function, wherever that is), and an index line's blob ids (of the whole
# file). Every other byte of a diff is kept.
HUNK_HEADER = re.compile(rb"^@@ -\d+(,\d+)? \+\d+(,\d+)? @@.*$", re.DOTALL)
INDEX_IDS = re.compile(rb"^index [0-9a-f]+\.\.[0-9a-f]+")


def without_offsets(line: bytes) -> bytes:
    """One line of a git diff as it counts when two changes are compared: a hunk header
    as its line counts only (``@@ -,3 +,4 @@``), an index line without its blob ids; any
    other line as it is (``runner.mirror.change_id``, the review's interdiff)."""
    if line.startswith(b"@@ "):
        return HUNK_HEADER.sub(
            lambda m: b"@@ -" + (m[1] or b"") + b" +" + (m[2] or b"") + b" @@", line
        )
    if line.startswith(b"index "):
        return INDEX_IDS.sub(b"index", line)
    return line


def parse_diff(data: bytes) -> PatchSet:
    """A diff's head parsed whole, lines and all, for the page (which shows at most that)."""
    text = _text(data, "diff")
    try:
        patch = PatchSet(text)
    except UnidiffParseError as exc:
        raise ValidationError({"file": f"not a unified diff: {exc}"}) from exc
    if not len(patch):
        raise ValidationError({"file": "the diff changes no file"})
    return patch


def summarize_diff(fileobj) -> dict:
    files, paths, files_changed, added, removed = [], {}, 0, 0, 0
    for changed in diff_files(fileobj):
        files_changed += 1
        added, removed = added + changed.added, removed + changed.removed
        if len(files) < MAX_LISTED:
            files.append(
                {
                    "path": (changed.path or "")[:300],
                    "added": changed.added,
                    "removed": changed.removed,
                    "status": changed.status,
                }
            )
        if len(paths) < MAX_LISTED * 2:
            paths.update(dict.fromkeys(diff_paths([changed])))
    return {
        "files_changed": files_changed,
        "added": added,
        "removed": removed,
        "files": files,
        "paths": list(paths)[: MAX_LISTED * 2],
    }


def _image_size(data: bytes) -> tuple[str, int, int]:
    if data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return "png", width, height
    if data.startswith(b"\xff\xd8\xff"):
        return "jpeg", 0, 0
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        width, height = struct.unpack("<HH", data[6:10])
        return "gif", width, height
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp", 0, 0
    raise ValidationError({"file": "a screenshot must be a PNG, JPEG, GIF or WebP image"})


def summarize_screenshot(fileobj) -> dict:
    fileobj.seek(0)
    head = fileobj.read(32)
    fileobj.seek(0)
    fmt, width, height = _image_size(head)
    return {"format": fmt, "width": width, "height": height}


def _printable(text: str) -> str:
    """A key from a hostile JSON file, storable anywhere: NUL and lone surrogates replaced."""
    return text.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")


def _has_lone_surrogate(value) -> bool:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(item) for item in value)
    return False


def summarize_json(data: bytes) -> dict:
    text = _text(data, "json")
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValidationError({"file": f"not valid JSON: {str(exc)[:200]}"}) from exc
    if _has_lone_surrogate(value):
        raise ValidationError(
            {"file": "the JSON holds a lone surrogate (\\ud800…), which is not Unicode"}
        )
    summary = {"type": type(value).__name__}
    if isinstance(value, dict):
        # A key may hold "\u0000", which no text column accepts: show it replaced.
        summary["keys"] = sorted(_printable(key) for key in value)[:MAX_LISTED]
    elif isinstance(value, list):
        summary["items"] = len(value)
    return summary


def summarize_text(fileobj, kind: str) -> dict:
    """Line count of a text file, streamed (logs may be large); refuses binary content."""
    stats = getattr(fileobj, "text_stats", None)  # counted while it was uploaded
    if stats is not None:
        if stats["nul"]:
            raise ValidationError({"file": f"a {kind} must be text; this file has NUL bytes"})
        return {"lines": stats["lines"]}
    lines, size, tail = 0, 0, b""
    fileobj.seek(0)
    for chunk in fileobj.chunks():
        if b"\x00" in chunk:
            raise ValidationError({"file": f"a {kind} must be text; this file has NUL bytes"})
        lines += chunk.count(b"\n")
        size += len(chunk)
        tail = chunk[-1:]
    fileobj.seek(0)
    if size and tail != b"\n":
        lines += 1
    return {"lines": lines}


def summarize_link(data: bytes) -> dict:
    url = _text(data, "link").strip()
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc or "\n" in url:
        raise ValidationError({"file": "a link must hold one http(s) URL"})
    return {"url": url[:2000]}


def summarize(kind: str, fileobj) -> dict:
    """Validate ``fileobj`` as ``kind`` and return its summary; raise ValidationError if it isn't."""
    if fileobj.size == 0:
        raise ValidationError({"file": "the file is empty"})
    if kind in ("log", "note"):
        return summarize_text(fileobj, kind)
    if kind == "screenshot":
        return summarize_screenshot(fileobj)
    streamed = {"junit": summarize_junit, "coverage": summarize_coverage, "diff": summarize_diff}
    if kind in streamed:
        try:
            return streamed[kind](fileobj)
        finally:
            fileobj.seek(0)
    data = _read(fileobj, kind)
    return {"json": summarize_json, "link": summarize_link}[kind](data)
