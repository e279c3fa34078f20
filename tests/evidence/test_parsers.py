"""Evidence parsers on real tool output, and on hostile files that must be refused quickly."""

import json
import shutil
import subprocess
import threading
from pathlib import Path
from xml.etree import ElementTree

import pytest
from django.core.exceptions import ValidationError
from django.core.files.base import ContentFile

from demo.artifacts import _difflib_diff
from evidence.parsers import (
    CHUNK,
    DETAILS_CHARS,
    MAX_XML_DEPTH,
    MAX_XML_TOKEN,
    Case,
    diff_files,
    junit_cases,
    summarize,
)
from projects.errors import TooLarge
from tests.evidence.real_reports import CALC

SCREENSHOT = Path(__file__).resolve().parents[2] / "demo" / "screenshot.png"


def file_of(content: bytes, name="evidence") -> ContentFile:
    return ContentFile(content, name=name)


def git(*args, cwd):
    identity = ["-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    return subprocess.run(
        ["git", *identity, *args], cwd=cwd, capture_output=True, timeout=30, check=True
    ).stdout


@pytest.fixture(scope="module")
def git_diff(tmp_path_factory):
    """``git diff`` of a real change: one file modified, one added, one removed, one renamed."""
    if shutil.which("git") is None:
        pytest.skip("needs git")
    work = tmp_path_factory.mktemp("repo")
    git("init", "-q", cwd=work)
    (work / "calc.py").write_text(CALC)
    (work / "old.txt").write_text("obsolete\n")
    (work / "notes.md").write_text("one\ntwo\nthree\nfour\nfive\n")
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "base", cwd=work)
    (work / "calc.py").write_text(CALC.replace("return a + b", "return b + a") + "\n\nPI = 3\n")
    (work / "old.txt").unlink()
    (work / "docs").mkdir()
    (work / "docs" / "new.md").write_text("# New\n")
    (work / "notes.md").rename(work / "docs" / "notes.md")
    git("add", "-A", cwd=work)
    return git("diff", "--cached", "-M", cwd=work)


# --- Real artifacts -------------------------------------------------------------------------


def test_junit_summary_of_a_real_pytest_run(suite):
    summary = summarize("junit", file_of(suite["junit"], "junit.xml"))

    assert {k: v for k, v in summary.items() if k != "failures"} == {
        "tests": 3,
        "passed": 1,
        "failed": 1,
        "error": 0,
        "skipped": 1,
    }
    failure = ElementTree.fromstring(suite["junit"]).find(".//failure")
    assert summary["failures"] == [
        {
            "test": "test_tiny::test_adds_wrongly",
            "outcome": "failed",
            "message": failure.get("message").strip()[:500],
        }
    ]


def test_coverage_summary_of_a_real_coverage_report(suite):
    summary = summarize("coverage", file_of(suite["coverage"], "coverage.xml"))

    root = ElementTree.fromstring(suite["coverage"])
    assert summary == {
        "line_rate": float(root.get("line-rate")),
        "branch_rate": float(root.get("branch-rate")),
        "lines_valid": int(root.get("lines-valid")),
        "lines_covered": int(root.get("lines-covered")),
    }
    assert 0 < summary["line_rate"] < 1


def test_diff_summary_of_a_real_git_diff(git_diff):
    summary = summarize("diff", file_of(git_diff, "change.diff"))

    assert summary["paths"] == ["calc.py", "docs/new.md", "notes.md", "docs/notes.md", "old.txt"]
    assert summary["files_changed"] == 4
    assert [(f["path"], f["status"], f["added"], f["removed"]) for f in summary["files"]] == [
        ("calc.py", "modified", 4, 1),
        ("docs/new.md", "added", 1, 0),
        ("docs/notes.md", "modified", 0, 0),
        ("old.txt", "removed", 0, 1),
    ]
    assert (summary["added"], summary["removed"]) == (5, 2)


def test_log_summary_counts_the_lines_of_a_real_pytest_log(suite):
    summary = summarize("log", file_of(suite["log"], "pytest.log"))

    assert summary == {"lines": suite["log"].count(b"\n")}


def test_screenshot_summary_reads_the_png_size():
    summary = summarize("screenshot", file_of(SCREENSHOT.read_bytes(), "queue.png"))

    assert summary == {"format": "png", "width": 720, "height": 300}


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b'{"tests": 3, "failed": 1}', {"type": "dict", "keys": ["failed", "tests"]}),
        (b"[1, 2, 3]", {"type": "list", "items": 3}),
        (b'"just text"', {"type": "str"}),
    ],
)
def test_json_summary(content, expected):
    assert summarize("json", file_of(content, "report.json")) == expected


def test_link_summary():
    summary = summarize("link", file_of(b"https://ci.example.invalid/runs/42\n", "run.url"))

    assert summary == {"url": "https://ci.example.invalid/runs/42"}


@pytest.mark.parametrize(("content", "lines"), [(b"a\nb\n", 2), (b"a\nb", 2), (b"\n", 1)])
def test_note_and_log_summaries_count_lines(content, lines):
    assert summarize("note", file_of(content)) == {"lines": lines}
    assert summarize("log", file_of(content)) == {"lines": lines}


def test_a_junit_report_is_not_a_coverage_report_and_back(suite):
    with pytest.raises(ValidationError):
        summarize("coverage", file_of(suite["junit"]))
    with pytest.raises(ValidationError):
        summarize("junit", file_of(suite["coverage"]))


def test_json_over_the_parse_limit_is_refused_while_reports_stream_past_it(
    suite, git_diff, settings
):
    settings.FACTORY_MAX_PARSED_BYTES = 100
    big_json = b'{"tests": [' + b"1, " * 100 + b"1]}"

    with pytest.raises(TooLarge):
        summarize("json", file_of(big_json))
    assert summarize("junit", file_of(suite["junit"]))["tests"] == 3
    assert 0 < summarize("coverage", file_of(suite["coverage"]))["line_rate"] < 1
    assert summarize("diff", file_of(git_diff))["files_changed"] == 4
    assert summarize("log", file_of(suite["log"])) == {"lines": suite["log"].count(b"\n")}


# --- Hostile input ----------------------------------------------------------------------------

BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
 <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
 <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
 <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
 <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<testsuites name="&lol9;"/>
"""
EXTERNAL_ENTITY = b"""<?xml version="1.0"?>
<!DOCTYPE testsuites [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>
<testsuites name="&xxe;"><testsuite name="&xxe;"/></testsuites>
"""
EXTERNAL_DTD = b"""<?xml version="1.0"?>
<!DOCTYPE testsuites SYSTEM "http://dtd.example.invalid/junit.dtd">
<testsuites/>
"""
PLAIN_DTD = b"""<?xml version="1.0"?>
<!DOCTYPE testsuites [<!ELEMENT testsuites ANY>]>
<testsuites/>
"""

HOSTILE = {
    "junit billion laughs": ("junit", BILLION_LAUGHS),
    "coverage billion laughs": ("coverage", BILLION_LAUGHS.replace(b"testsuites", b"coverage")),
    "junit external entity": ("junit", EXTERNAL_ENTITY),
    "coverage external entity": ("coverage", EXTERNAL_ENTITY.replace(b"testsuites", b"coverage")),
    "junit external dtd": ("junit", EXTERNAL_DTD),
    "junit internal dtd": ("junit", PLAIN_DTD),
    "junit not xml": ("junit", b"collected 3 items\n1 failed, 1 passed\n"),
    "junit truncated": ("junit", b"<testsuites><testsuite><testcase name="),
    "junit wrong root": ("junit", b"<html><body>3 passed</body></html>"),
    "junit namespaced root": ("junit", b'<x:testsuites xmlns:x="urn:x"/>'),
    "coverage wrong root": ("coverage", b'<report line-rate="1"/>'),
    "coverage without line-rate": ("coverage", b"<coverage/>"),
    "coverage rate above one": ("coverage", b'<coverage line-rate="1.5"/>'),
    "coverage rate not a number": ("coverage", b'<coverage line-rate="NaN"/>'),
    "junit empty": ("junit", b""),
    "coverage empty": ("coverage", b""),
    "diff empty": ("diff", b""),
    "log empty": ("log", b""),
    "screenshot empty": ("screenshot", b""),
    "diff invalid utf-8": ("diff", b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-caf\xe9\n+cafe\n"),
    "diff changing no file": ("diff", b"I changed the claim queue, trust me.\n"),
    "diff with a short hunk": ("diff", b"--- a/x\n+++ b/x\n@@ -1,5 +1,5 @@\n-a\n"),
    "screenshot svg": ("screenshot", b'<svg xmlns="http://www.w3.org/2000/svg"><script/></svg>'),
    "screenshot html": ("screenshot", b"<!doctype html><img src=x onerror=alert(1)>"),
    "screenshot truncated png": ("screenshot", b"\x89PNG\r\n\x1a\n\x00\x00"),
    "json deeply nested list": ("json", b"[" * 100000),
    "json deeply nested object": ("json", b'{"a":' * 100000),
    "json not json": ("json", b"{'single': 'quotes'}"),
    "json invalid utf-8": ("json", b'{"a": "\xff"}'),
    "json huge integer": ("json", b"9" * 5000),
    "link javascript": ("link", b"javascript:alert(document.cookie)"),
    "link data": ("link", b"data:text/html,<script>alert(1)</script>"),
    "link file": ("link", b"file:///etc/passwd"),
    "link without host": ("link", b"https:///path"),
    "link two urls": ("link", b"https://a.example.invalid/\nhttps://b.example.invalid/"),
    "log nul bytes": ("log", b"line one\n\x00\x00\x00binary"),
    "note nul bytes": ("note", b"\x00"),
}


def summarize_within(kind: str, content: bytes, seconds: float = 30):
    """Run the parser in a thread so a hang fails the test instead of stalling the suite."""
    outcome = {}

    def target():
        try:
            outcome["summary"] = summarize(kind, file_of(content))
        except Exception as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"parsing the {kind} file did not finish"
    return outcome


@pytest.mark.parametrize("case", HOSTILE)
def test_hostile_files_are_refused_with_a_validation_error(case):
    kind, content = HOSTILE[case]

    outcome = summarize_within(kind, content)

    assert isinstance(outcome.get("error"), ValidationError), outcome
    assert list(outcome["error"].message_dict) == ["file"]


def test_an_external_entity_is_never_resolved():
    outcome = summarize_within("junit", EXTERNAL_ENTITY)

    message = json.dumps(outcome["error"].message_dict)
    assert "DTD" in message
    assert "root:" not in message


@pytest.mark.parametrize(
    "attribute", ['lines-valid="many"', 'lines-covered="1e3"', 'lines-valid="12.5"']
)
def test_a_coverage_report_with_malformed_counts_is_refused(attribute):
    content = f'<coverage line-rate="0.5" {attribute}/>'.encode()

    outcome = summarize_within("coverage", content)

    assert isinstance(outcome.get("error"), ValidationError), outcome


# --- Streaming: one parser, bounded memory ------------------------------------------------------

TRICKY_JUNIT = b"""<?xml version="1.0" encoding="utf-8"?>
<testsuites>
  <testcase classname="not.in.a.suite" name="ignored"/>
  <testsuite name="outer">
    <testcase classname="tests.test_a" name="test_one" file="tests/test_a.py" time="0.25"/>
    <testsuite name="inner">
      <testcase classname="tests.test_b" name="test_two" time="soon">
        <failure message="first">#x1B[31mboom#x1B[0m</failure><error message="second"/>
      </testcase>
    </testsuite>
    <testcase classname="tests.test_a" name="test_three"><skipped/></testcase>
    <testcase classname="tests.test_a" name="test_four">
      <system-out>noise</system-out><error>  only text  </error>
    </testcase>
  </testsuite>
  <testsuites><testsuite><testcase classname="nested.testsuites" name="ignored"/></testsuite></testsuites>
</testsuites>
"""


def junitparser_cases(content: bytes) -> list[tuple]:
    """What the parser before streaming found: junitparser over a whole ElementTree."""
    from junitparser import JUnitXml

    xml = JUnitXml.fromroot(ElementTree.fromstring(content))
    found = []
    for suite in xml:
        for case in suite:
            outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}
            first = case.result[0] if case.result else None
            found.append(
                (case.classname, case.name, outcome[first._tag] if first is not None else "passed")
            )
    return found


@pytest.mark.parametrize("report", ["tricky", "real"])
def test_streamed_junit_cases_are_the_cases_junitparser_found(report, suite):
    content = TRICKY_JUNIT if report == "tricky" else suite["junit"]

    streamed = list(junit_cases(file_of(content)))

    assert sorted((c.classname, c.name, c.outcome) for c in streamed) == sorted(
        junitparser_cases(content)
    )


def test_a_streamed_case_keeps_its_first_result_file_and_time():
    cases = {case.name: case for case in junit_cases(file_of(TRICKY_JUNIT))}

    assert cases["test_one"] == Case(
        "tests.test_a", "test_one", "tests/test_a.py", "passed", time=0.25
    )
    assert cases["test_two"] == Case("tests.test_b", "test_two", "", "failed", "first", "boom")
    assert (cases["test_four"].outcome, cases["test_four"].reason) == ("error", "only text")
    assert [c.name for c in junit_cases(file_of(TRICKY_JUNIT))] == [
        "test_one",
        "test_two",
        "test_three",
        "test_four",
    ]


def test_a_failures_text_is_kept_only_to_its_cap():
    body = b"x" * (5 * DETAILS_CHARS)
    report = (
        b'<testsuite><testcase name="t"><failure message="m">'
        + body
        + b"</failure></testcase></testsuite>"
    )

    (case,) = junit_cases(file_of(report))

    assert (case.outcome, case.message, len(case.details)) == ("failed", "m", DETAILS_CHARS)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (
            b'<testsuite><testcase name="' + b"x" * (2 * MAX_XML_TOKEN) + b'"/></testsuite>',
            "longer than",
        ),
        (b"<testsuite><!--" + b"x" * (2 * MAX_XML_TOKEN) + b"--></testsuite>", "longer than"),
        (
            b"<testsuite>"
            + b"<a>" * (MAX_XML_DEPTH + 1)
            + b"</a>" * (MAX_XML_DEPTH + 1)
            + b"</testsuite>",
            "deeper than",
        ),
    ],
    ids=["huge-attribute", "huge-comment", "deep-nesting"],
)
def test_xml_that_expat_would_hold_whole_is_refused(content, problem):
    outcome = summarize_within("junit", content)

    assert isinstance(outcome.get("error"), ValidationError), outcome
    assert problem in outcome["error"].message_dict["file"][0]


def test_a_coverage_report_is_read_no_further_than_its_root():
    content = (
        b'<coverage line-rate="0.75" lines-valid="4" lines-covered="3"><packages>'
        + b"<broken" * 1000
    )

    summary = summarize("coverage", file_of(content))

    assert summary == {"line_rate": 0.75, "branch_rate": 0, "lines_valid": 4, "lines_covered": 3}


FORMAT_PATCH = b"""From 3f1c2a7 Mon Sep 17 00:00:00 2001
Subject: [PATCH] Change things

A commit message line --- that looks odd
---
 a.py | 2 +-

diff --git a/a.py b/a.py
index 1111111..2222222 100644
--- a/a.py
+++ b/a.py
@@ -1,2 +1,2 @@
 keep
-old
+new
\\ No newline at end of file
--- a/gone.txt
+++ /dev/null
@@ -1 +0,0 @@
-bye
--- a/crlf.txt\t2026-01-01 00:00:00
+++ b/crlf.txt\t2026-01-02 00:00:00
@@ -1 +1,2 @@
-a\r
+b\r
+c\r
diff --git a/logo.png b/logo.png
new file mode 100644
index 0000000..3333333
Binary files /dev/null and b/logo.png differ
diff --git a/old name.txt b/new name.txt
similarity index 100%
rename from old name.txt
rename to new name.txt
--
2.43.0
"""


def unidiff_files(content: bytes) -> list[tuple]:
    from unidiff import PatchSet

    return [
        (
            f.source_file,
            f.target_file,
            f.path,
            f.added,
            f.removed,
            f.is_added_file,
            f.is_removed_file,
        )
        for f in PatchSet(content.decode())
    ]


@pytest.mark.parametrize("diff", ["format-patch", "git", "difflib"])
def test_streamed_diff_files_are_the_files_unidiff_found(diff, git_diff):
    content = {
        "format-patch": FORMAT_PATCH,
        "git": git_diff,
        "difflib": _difflib_diff(
            {"a.py": "x\ny\n", "b.py": "1\n"}, {"a.py": "x\nz\n", "c.py": "2\n"}
        ),
    }[diff]

    streamed = list(diff_files(file_of(content)))

    assert [
        (
            f.source_file,
            f.target_file,
            f.path,
            f.added,
            f.removed,
            f.is_added_file,
            f.is_removed_file,
        )
        for f in streamed
    ] == unidiff_files(content)


def test_a_diff_line_longer_than_a_chunk_counts_once():
    minified = b"+" + b"var a=1;" * (CHUNK // 4) + b"\n"
    content = b"--- a/app.min.js\n+++ b/app.min.js\n@@ -1 +1,2 @@\n-old\n" + minified + b"+end\n"

    summary = summarize("diff", file_of(content))

    assert (summary["files_changed"], summary["added"], summary["removed"]) == (1, 2, 1)
    assert summary["paths"] == ["app.min.js"]
