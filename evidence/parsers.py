"""Validate evidence files by kind and extract a small summary for people and agents.

XML is parsed with defusedxml with DTDs forbidden, so entity bombs and external
entities are refused before expansion. A file that does not parse as its declared
kind is a ``ValidationError`` naming the problem; nothing is stored.
"""

import io
import json
import re
import struct
from urllib.parse import urlparse

from defusedxml import DefusedXmlException
from defusedxml import ElementTree as SafeET
from django.conf import settings
from django.core.exceptions import ValidationError
from junitparser import JUnitXml, JUnitXmlError
from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from tasks.errors import TooLarge

MAX_LISTED = 50  # failing tests or changed files listed in a summary
MESSAGE_CHARS = 500


def _read(fileobj, kind: str) -> bytes:
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


def parse_xml(data: bytes, kind: str):
    """Parse untrusted XML: no DTD, no entities, no external references."""
    try:
        return SafeET.parse(io.BytesIO(data), forbid_dtd=True)
    except DefusedXmlException as exc:
        raise ValidationError(
            {"file": f"the {kind} file declares a DTD or entities, which are refused ({exc})"}
        ) from exc
    except SafeET.ParseError as exc:
        raise ValidationError({"file": f"the {kind} file is not well-formed XML: {exc}"}) from exc


def junit_cases(xml: JUnitXml):
    """Yield ``(suite, case)`` for every test case in a report."""
    for suite in xml:
        for case in suite:
            yield suite, case


COLOUR_CODES = re.compile(r"(?:\x1b|#x1[Bb])\[[0-9;?]*[A-Za-z]")


def strip_colours(text: str) -> str:
    """Terminal colour codes out of a message (pytest's junitxml writes ESC as "#x1B")."""
    return COLOUR_CODES.sub("", text)


def case_outcome(case) -> tuple[str, str]:
    """``("passed" | "failed" | "error" | "skipped", message)`` for a junitparser test case."""
    for result in case.result:
        tag = result._tag
        message = strip_colours((result.message or result.text or "").strip())[:MESSAGE_CHARS]
        if tag == "failure":
            return "failed", message
        if tag == "error":
            return "error", message
        if tag == "skipped":
            return "skipped", message
    return "passed", ""


def parse_junit(data: bytes) -> JUnitXml:
    tree = parse_xml(data, "junit")
    try:
        return JUnitXml.fromroot(tree.getroot())
    except JUnitXmlError as exc:
        raise ValidationError(
            {"file": "not a JUnit report: the root element must be <testsuites> or <testsuite>"}
        ) from exc


def summarize_junit(data: bytes) -> dict:
    xml = parse_junit(data)
    totals = {"tests": 0, "passed": 0, "failed": 0, "error": 0, "skipped": 0}
    failures = []
    try:
        for _suite, case in junit_cases(xml):
            outcome, message = case_outcome(case)
            totals["tests"] += 1
            totals[outcome] += 1
            if outcome in ("failed", "error") and len(failures) < MAX_LISTED:
                failures.append(
                    {
                        "test": f"{case.classname}::{case.name}",
                        "outcome": outcome,
                        "message": message,
                    }
                )
    except (ValueError, TypeError) as exc:
        raise ValidationError({"file": f"the JUnit report has a malformed value: {exc}"}) from exc
    return {**totals, "failures": failures}


def summarize_coverage(data: bytes) -> dict:
    root = parse_xml(data, "coverage").getroot()
    if root.tag != "coverage" or root.get("line-rate") is None:
        raise ValidationError(
            {"file": "not a Cobertura report: expected <coverage line-rate=…> as the root"}
        )
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


def diff_paths(patch: PatchSet) -> list[str]:
    """Every repository path a diff touches (both sides of a rename)."""
    paths = []
    for patched in patch:
        for path in (patched.source_file, patched.target_file):
            if path and path != "/dev/null":
                path = path[2:] if path[:2] in ("a/", "b/") else path
                if path not in paths:
                    paths.append(path)
    return paths


def parse_diff(data: bytes) -> PatchSet:
    text = _text(data, "diff")
    try:
        patch = PatchSet(io.StringIO(text))
    except UnidiffParseError as exc:
        raise ValidationError({"file": f"not a unified diff: {exc}"}) from exc
    if not len(patch):
        raise ValidationError({"file": "the diff changes no file"})
    return patch


def summarize_diff(data: bytes) -> dict:
    patch = parse_diff(data)
    files = [
        {
            "path": (p.path or "")[:300],
            "added": p.added,
            "removed": p.removed,
            "status": "added"
            if p.is_added_file
            else "removed"
            if p.is_removed_file
            else "modified",
        }
        for p in patch
    ]
    return {
        "files_changed": len(files),
        "added": patch.added,
        "removed": patch.removed,
        "files": files[:MAX_LISTED],
        "paths": diff_paths(patch)[: MAX_LISTED * 2],
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
    data = _read(fileobj, kind)
    return {
        "junit": summarize_junit,
        "coverage": summarize_coverage,
        "diff": summarize_diff,
        "json": summarize_json,
        "link": summarize_link,
    }[kind](data)
