"""Evidence parsers on real tool output, and on hostile files that must be refused quickly."""

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from xml.etree import ElementTree

import pytest
from django.core.exceptions import ValidationError
from django.core.files.base import ContentFile

from evidence.parsers import summarize
from tasks.errors import TooLarge

SCREENSHOT = Path(__file__).resolve().parents[2] / "tasks" / "demo" / "screenshot.png"

CALC = """\
def add(a, b):
    return a + b


def sign(x):
    if x < 0:
        return -1
    return 1
"""
TINY_SUITE = """\
import pytest
from calc import add


def test_adds():
    assert add(1, 2) == 3


def test_adds_wrongly():
    assert add(2, 2) == 5


@pytest.mark.skip(reason="not today")
def test_skipped():
    pass
"""


def file_of(content: bytes, name="evidence") -> ContentFile:
    return ContentFile(content, name=name)


PYTEST = ["-m", "pytest", "-p", "no:django", "-p", "no:cacheprovider", "-c", os.devnull]


def python(*args, cwd):
    """Run this interpreter outside Django's settings, as a developer's shell would."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, timeout=120
    )


def git(*args, cwd):
    identity = ["-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    return subprocess.run(
        ["git", *identity, *args], cwd=cwd, capture_output=True, timeout=30, check=True
    ).stdout


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    """A real pytest run of a tiny suite (one pass, one failure, one skip), with its reports."""
    work = tmp_path_factory.mktemp("tiny-suite")
    (work / "calc.py").write_text(CALC)
    (work / "test_tiny.py").write_text(TINY_SUITE)
    pytest = [*PYTEST, "--rootdir", str(work), "test_tiny.py"]
    data = f"--data-file={work / '.coverage'}"

    tests = python(*pytest, "--junitxml", str(work / "junit.xml"), cwd=work)
    covered = python("-m", "coverage", "run", data, "--include=calc.py", *pytest, cwd=work)
    report = python("-m", "coverage", "xml", data, "-o", str(work / "coverage.xml"), cwd=work)

    assert (tests.returncode, covered.returncode, report.returncode) == (1, 1, 0), tests.stderr
    return {
        "junit": (work / "junit.xml").read_bytes(),
        "coverage": (work / "coverage.xml").read_bytes(),
        "log": tests.stdout,
    }


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


def test_structured_files_over_the_parse_limit_are_refused(suite, settings):
    settings.FACTORY_MAX_PARSED_BYTES = 100

    with pytest.raises(TooLarge):
        summarize("junit", file_of(suite["junit"]))
    with pytest.raises(TooLarge):
        summarize("coverage", file_of(suite["coverage"]))
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
