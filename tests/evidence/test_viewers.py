"""Evidence viewers on real tool output: ANSI logs, JUnit tables, highlighted diffs, images."""

import re

import pytest
from django.utils.html import escape

from demo.artifacts import git_diff, screenshot
from evidence import viewers
from evidence.viewers import LIMIT_BYTES, LOG_TAIL_LINES, ansi_to_html

JUNIT_MIXED = b"""<?xml version="1.0" encoding="utf-8"?>
<testsuite name="pytest" tests="5">
  <testcase classname="tests.test_b" name="test_passes" time="0.5"/>
  <testcase classname="tests.test_b" name="test_skipped" time="0"><skipped message="later"/></testcase>
  <testcase classname="tests.test_b" name="test_errors" time="0.1"><error message="boom"/></testcase>
  <testcase classname="tests.test_a" name="test_passes" time="0.2"/>
  <testcase classname="tests.test_b" name="test_fails" time="0.3"><failure message="no"/></testcase>
</testsuite>
"""


def spans_balance(html: str) -> bool:
    return html.count("<span") == html.count("</span>")


# --- ansi_to_html ---------------------------------------------------------------------------


def test_pytest_colours_become_spans(pytest_run):
    html = ansi_to_html(pytest_run.log.decode())

    assert "\x1b[31mFAILED\x1b[0m" in pytest_run.log.decode()
    assert '<span class="ansi-31">FAILED</span>' in html
    assert '<span class="ansi-32">PASSED</span>' in html
    assert (
        '<span class="ansi-31 ansi-bold">E       AssertionError: assert &#x27;FM-2&#x27; =='
        " &#x27;FM-3&#x27;</span>"
    ) in html
    assert "\x1b" not in html
    assert spans_balance(html)


def test_pytest_output_keeps_its_text_once_the_colours_are_gone(pytest_run):
    text = pytest_run.log.decode()

    html = ansi_to_html(text)

    assert re.sub(r"<[^>]+>", "", html) == escape(viewers.strip_ansi(text))


def test_nested_codes_and_resets():
    assert ansi_to_html("\x1b[1;32mok\x1b[39mbold\x1b[22mplain") == (
        '<span class="ansi-32 ansi-bold">ok</span><span class="ansi-bold">bold</span>plain'
    )
    assert ansi_to_html("\x1b[31mred\x1b[94mblue\x1b[mnone") == (
        '<span class="ansi-31">red</span><span class="ansi-94">blue</span>none'
    )
    assert ansi_to_html("\x1b[1m\x1b[31mE\x1b[0m after") == (
        '<span class="ansi-bold"></span><span class="ansi-31 ansi-bold">E</span> after'
    )
    assert ansi_to_html("\x1b[33munclosed") == '<span class="ansi-33">unclosed</span>'


def test_codes_other_than_colours_are_dropped():
    text = "\x1b[?25l\x1b[2K\x1b[1Gprogress\x1b]0;window title\x07 done\x1b(B\x1b[4munderlined"

    assert ansi_to_html(text) == "progress doneunderlined"


def test_extended_colour_parameters_are_not_read_as_basic_colours():
    assert ansi_to_html("\x1b[38;5;31mteal\x1b[0m") == "teal"


def test_html_in_a_log_is_escaped():
    html = ansi_to_html("<script>alert('x')</script> & \x1b[31m<img src=x onerror=alert(1)>\x1b[0m")

    assert html == (
        "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; "
        '<span class="ansi-31">&lt;img src=x onerror=alert(1)&gt;</span>'
    )


# --- junit_view ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_junit_view_lists_failures_first_then_errors_skips_and_passes(flow):
    _, attempt = flow.claimed()
    evidence = flow.attach(attempt, JUNIT_MIXED, kind="junit", name="junit.xml")

    view = viewers.junit_view(evidence)

    assert [(r.test, r.outcome, r.time, r.message) for r in view.rows] == [
        ("tests/test_b.py::test_fails", "failed", 0.3, "no"),
        ("tests/test_b.py::test_errors", "error", 0.1, "boom"),
        ("tests/test_b.py::test_skipped", "skipped", 0.0, "later"),
        ("tests/test_a.py::test_passes", "passed", 0.2, ""),
        ("tests/test_b.py::test_passes", "passed", 0.5, ""),
    ]
    assert view.totals == {"tests": 5, "failed": 1, "error": 1, "skipped": 1, "passed": 2}
    assert view.error == ""


@pytest.mark.django_db
def test_junit_view_of_a_real_pytest_report_puts_the_failure_first(flow, pytest_run):
    _, attempt = flow.claimed()
    evidence = flow.attach(attempt, pytest_run.junit, kind="junit", name="junit.xml")

    view = viewers.junit_view(evidence)

    assert [(r.test, r.outcome) for r in view.rows][:2] == [
        ("tests/test_claim_demo.py::test_claim_skips_tasks_with_open_dependencies", "failed"),
        ("tests/test_claim_demo.py::test_claim_takes_highest_priority_first", "passed"),
    ]
    assert view.totals == {"tests": 5, "failed": 1, "error": 0, "skipped": 0, "passed": 4}
    assert view.rows[0].message.startswith("AssertionError: assert 'FM-2' == 'FM-3'")


@pytest.mark.django_db
def test_junit_view_strips_colour_codes_from_real_pytest_messages(flow, pytest_run):
    _, attempt = flow.claimed()
    evidence = flow.attach(attempt, pytest_run.junit, kind="junit", name="junit.xml")

    row = viewers.junit_view(evidence).rows[0]

    assert "#x1B[" not in row.message + row.details
    assert "- FM-3\n" in row.message


@pytest.mark.django_db
def test_junit_view_lists_at_most_junit_rows_and_counts_the_rest(flow, monkeypatch):
    monkeypatch.setattr(viewers, "JUNIT_ROWS", 3)
    _, attempt = flow.claimed()
    passing = "".join(f'<testcase classname="tests.test_p" name="test_{n}"/>' for n in range(5))
    failing = (
        '<testcase classname="tests.test_f" name="test_bad"><failure message="no"/></testcase>'
    )
    report = f"<testsuite>{passing}{failing}</testsuite>".encode()
    evidence = flow.attach(attempt, report, kind="junit", name="junit.xml")

    view = viewers.junit_view(evidence)

    assert [(r.test, r.outcome) for r in view.rows] == [
        ("tests/test_f.py::test_bad", "failed"),
        ("tests/test_p.py::test_0", "passed"),
        ("tests/test_p.py::test_1", "passed"),
    ]
    assert view.totals == {"tests": 6, "failed": 1, "error": 0, "skipped": 0, "passed": 5}
    assert view.hidden == 3


# --- diff_view -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_diff_view_highlights_python_and_keeps_line_numbers(flow):
    _, attempt = flow.claimed()
    diff = git_diff(
        {"app.py": "import os\n\n\ndef f():\n    return 1\n"},
        {"app.py": "import os\n\n\ndef f():\n    return 2\n"},
    )
    evidence = flow.attach(attempt, diff, kind="diff", name="change.diff")

    view = viewers.diff_view(evidence)

    (file,) = view.files
    assert (file.path, file.status, file.added, file.removed) == ("app.py", "modified", 1, 1)
    assert [(line.kind, line.old, line.new) for line in file.lines] == [
        ("hunk", None, None),
        ("ctx", 2, 2),
        ("ctx", 3, 3),
        ("ctx", 4, 4),
        ("del", 5, None),
        ("add", None, 5),
    ]
    assert (
        file.lines[3].html
        == '<span class="k">def</span><span class="w"> </span><span class="nf">f</span><span class="p">():</span>'
    )
    assert '<span class="k">return</span>' in file.lines[5].html
    assert '<span class="mi">2</span>' in file.lines[5].html
    assert view.cut is False


@pytest.mark.django_db
def test_diff_view_escapes_hostile_paths_code_and_hunk_headers(flow):
    _, attempt = flow.claimed()
    diff = (
        b"diff --git a/<b>evil</b>.py b/<b>evil</b>.py\n"
        b"--- a/<b>evil</b>.py\n"
        b"+++ b/<b>evil</b>.py\n"
        b"@@ -1 +1 @@ <img src=x onerror=alert(1)>\n"
        b"-x = 1\n"
        b'+x = "<script>alert(1)</script>"\n'
    )
    evidence = flow.attach(attempt, diff, kind="diff", name="evil.diff")

    (file,) = viewers.diff_view(evidence).files

    assert file.path == "<b>evil</b>.py"  # plain text: the template escapes it
    assert file.lines[0].html == "@@ -1,1 +1,1 @@ &lt;img src=x onerror=alert(1)&gt;"
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in file.lines[2].html
    assert all("<script" not in line.html and "<img" not in line.html for line in file.lines)


@pytest.mark.django_db
def test_diff_view_cuts_a_large_diff_at_the_last_complete_file(flow):
    _, attempt = flow.claimed()
    after = {f"pkg/module_{n:03}.py": f"VALUE_{n} = {'1' * 1000}\n" * 2 for n in range(300)}
    diff = git_diff({"README": "demo\n"}, {"README": "demo\n", **after})
    evidence = flow.attach(attempt, diff, kind="diff", name="big.diff")

    view = viewers.diff_view(evidence)

    assert len(diff) > LIMIT_BYTES
    assert view.cut is True
    assert 0 < len(view.files) < 300
    assert [f.path for f in view.files] == sorted(after)[: len(view.files)]
    assert all((f.added, len(f.lines)) == (2, 3) for f in view.files)


@pytest.mark.django_db
def test_diff_view_of_one_large_file_shows_its_start(flow):
    _, attempt = flow.claimed()
    big = "".join(f"VALUE_{n} = {'1' * 100}\n" for n in range(6000))
    diff = git_diff({"README": "demo\n"}, {"README": "demo\n", "big.py": big})
    evidence = flow.attach(attempt, diff, kind="diff", name="big.diff")

    view = viewers.diff_view(evidence)

    assert len(diff) > LIMIT_BYTES
    assert (view.error, view.cut) == ("", True)
    assert [f.path for f in view.files] == ["big.py"]
    assert view.files[0].lines[1].html.startswith('<span class="n">VALUE_0</span>')


# --- log_view --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_log_view_keeps_the_last_lines_and_says_it_was_cut(flow):
    _, attempt = flow.claimed()
    log = "".join(f"line {n}\n" for n in range(1000)).encode() + b"\x1b[31mFAILED\x1b[0m\n"
    evidence = flow.attach(attempt, log, kind="log", name="run.log")

    view = viewers.log_view(evidence)

    assert (view.cut, view.lines) == (True, LOG_TAIL_LINES)
    lines = view.html.split("\n")
    assert lines[0] == f"line {1001 - LOG_TAIL_LINES}"
    assert lines[-2:] == ["line 999", '<span class="ansi-31">FAILED</span>']


@pytest.mark.django_db
def test_log_view_of_a_short_log_is_whole(flow, pytest_run):
    _, attempt = flow.claimed()
    evidence = flow.attach(attempt, pytest_run.log, kind="log", name="pytest.log")

    view = viewers.log_view(evidence)

    assert (view.cut, view.lines) == (False, len(pytest_run.log.decode().splitlines()))
    assert '<span class="ansi-31">FAILED</span>' in view.html
    assert "\x1b" not in view.html


# --- image_type ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_image_type_only_for_screenshots(flow):
    _, attempt = flow.claimed()
    png = flow.attach(attempt, screenshot(), kind="screenshot", name="queue.png")
    gif = flow.attach(
        attempt, b"GIF89a\x01\x00\x01\x00" + b"\x00" * 20, kind="screenshot", name="tiny.gif"
    )
    log = flow.attach(attempt, b"\x89PNG looks like an image\n", kind="log")
    note = flow.attach(attempt, b"# not an image\n", kind="note", name="n.md")

    assert [viewers.image_type(e) for e in (png, gif, log, note)] == [
        "image/png",
        "image/gif",
        None,
        None,
    ]


# --- interdiff_view --------------------------------------------------------------------------

GUARD = 'def may_delete(roles):\n    if "admin" in roles:\n        return True\n    return False\n'


def two_diffs(flow, before: dict, after: dict, *, above: str = ""):
    """The diff adding ``before`` to a file, and the one adding ``after`` to the same file
    with ``above`` written at its top (a target that moved elsewhere)."""
    _, attempt = flow.claimed()
    padding = "# who may do what\n" * 8
    first = git_diff({"guard.py": padding}, {k: padding + v for k, v in before.items()})
    second = git_diff(
        {"guard.py": above + padding}, {k: above + padding + v for k, v in after.items()}
    )
    return (
        flow.attach(attempt, first, kind="diff", name="approved.diff"),
        flow.attach(attempt, second, kind="diff", name="again.diff"),
    )


@pytest.mark.django_db
def test_an_interdiff_shows_the_line_whose_indentation_changed_and_says_only_whitespace_differs(
    flow,
):
    approved, again = two_diffs(
        flow,
        {"guard.py": GUARD},
        {"guard.py": GUARD.replace("        return True", "    return True")},
    )

    view = viewers.interdiff_view(approved, again)

    changed = [(kind, html) for kind, html in view.rows if kind in ("add", "del")]
    assert changed == [("del", "+        return True"), ("add", "+    return True")]
    assert (view.whitespace_only, view.same_text, view.too_large) == (True, False, False)


@pytest.mark.django_db
def test_an_interdiff_draws_tabs_trailing_spaces_and_carriage_returns(flow):
    approved, again = two_diffs(flow, {"guard.py": "x = 1\n"}, {"guard.py": "\tx = 1 \r\n"})

    changed = [html for kind, html in viewers.interdiff_view(approved, again).rows if kind == "add"]

    assert changed == [
        '+<span class="ws">→\t</span>x = 1<span class="ws">·</span><span class="ws">CR</span>'
    ]


@pytest.mark.django_db
def test_an_interdiff_of_a_change_moved_down_its_file_is_empty(flow):
    approved, again = two_diffs(flow, {"guard.py": GUARD}, {"guard.py": GUARD}, above="import os\n")

    view = viewers.interdiff_view(approved, again)

    assert (view.rows, view.same_text) == ([], True)


@pytest.mark.django_db
def test_an_interdiff_escapes_what_the_diffs_hold(flow):
    approved, again = two_diffs(
        flow, {"guard.py": "x = 1\n"}, {"guard.py": "x = '<script>alert(1)</script>'\n"}
    )

    html = "".join(html for _, html in viewers.interdiff_view(approved, again).rows)

    assert "<script" not in html and "&lt;script&gt;" in html


@pytest.mark.django_db
def test_an_interdiff_past_the_budget_shows_the_changed_middle_removed_then_added(
    flow, monkeypatch
):
    # The agent writes both diffs; 16,000 lines built for difflib (autojunk off) held
    # the reviewer's task page for over a minute.
    from projects import diffs

    monkeypatch.setattr(diffs, "BUDGET_WITHOUT_AUTOJUNK", 50)
    _, attempt = flow.claimed()
    old = ["+a0", "+s", "+a1", "+s", "+a2", "+s", "+a3", "+s"]
    new = ["+b0", "+s", "+b1", "+s", "+b2", "+s", "+b3", "+s", "+b4"]
    approved, current = (
        flow.attach(
            attempt,
            "\n".join(["--- a/x", "+++ b/x", f"@@ -0,0 +1,{len(lines)} @@", *lines, ""]).encode(),
            kind="diff",
            name="c.diff",
        )
        for lines in (old, new)
    )

    interdiff = viewers.interdiff_view(approved, current)

    assert [kind for kind, _ in interdiff.rows] == [
        "gap",
        *["ctx"] * 2,
        *["del"] * 9,
        *["add"] * 10,
        "ctx",
    ]
