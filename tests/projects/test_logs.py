"""Log lines: JSON objects in production, readable text on a developer's machine, each with
the request id of the request or job that wrote it."""

import json
import logging
import sys

from projects import logs


def record(message="gate %s ended", *args, exc_info=None, **extra) -> logging.LogRecord:
    made = logging.getLogger("evidence.jobs").makeRecord(
        "evidence.jobs", logging.INFO, "jobs.py", 10, message, args, exc_info, extra=extra
    )
    logs.RequestIdFilter().filter(made)
    return made


def test_a_json_line_parses_with_its_request_id_fields_and_extras():
    with logs.bound("req-1"):
        line = logs.JsonFormatter().format(record("gate %s ended", "tests-pass", run=7))

    parsed = json.loads(line)
    assert "\n" not in line
    assert parsed.pop("time").endswith("+00:00")
    assert parsed == {
        "level": "INFO",
        "logger": "evidence.jobs",
        "message": "gate tests-pass ended",
        "request_id": "req-1",
        "run": 7,
    }


def test_a_json_line_holds_an_exception_as_one_string_and_outside_a_request_no_id():
    try:
        raise ValueError("boom")
    except ValueError:
        made = record("failed", exc_info=sys.exc_info())

    parsed = json.loads(logs.JsonFormatter().format(made))

    assert parsed["request_id"] is None
    assert parsed["exception"].startswith("Traceback (most recent call last):")
    assert parsed["exception"].endswith("ValueError: boom")


def test_an_extra_never_hides_a_field_and_what_json_cannot_hold_is_written_as_text():
    with logs.bound("req-2"):
        made = record("hello", level="forged", when=logs)

    parsed = json.loads(logs.JsonFormatter().format(made))

    assert (parsed["level"], parsed["request_id"]) == ("INFO", "req-2")
    assert parsed["when"].startswith("<module 'projects.logs'")


def test_a_text_line_shows_the_request_id_or_a_dash():
    formatter = logs.TextFormatter("%(levelname)s %(name)s [%(request_id)s] %(message)s")

    with logs.bound("req-3"):
        inside = formatter.format(record("gate %s ended", "runner"))
    outside = formatter.format(record("idle"))

    assert inside == "INFO evidence.jobs [req-3] gate runner ended"
    assert outside == "INFO evidence.jobs [-] idle"


def test_sane_ids_are_short_tokens_of_letters_digits_and_a_little_punctuation():
    assert [logs.sane(v) for v in ("a", "A-9._:z", "x" * 128)] == [True, True, True]
    assert [
        logs.sane(v) for v in ("", "x" * 129, "two words", "a\nb", "a\rb", "é", 'a"b', None)
    ] == [False] * 8
