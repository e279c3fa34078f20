"""Request ids and log lines.

Each request carries an id (``X-Request-ID``: the caller's when it is a sane token, else a
new one), held in a context variable while the request runs and passed into every job it
starts (``factory_site.celery`` carries it in the job's message), so that one id follows a
submission through its gate and runner jobs. ``RequestIdFilter`` writes it on every log
record a handler emits; ``JsonFormatter`` writes one JSON object per line (production),
``TextFormatter`` a readable line (a developer's machine). ``LOGGING`` in settings wires them.
"""

import json
import logging
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime

# Letters, digits and ``._:-``, at most 128: what a proxy or a client's tracer sends, and
# nothing that could split a log line or a header (spaces, newlines, quotes).
SANE = re.compile(r"[A-Za-z0-9._:-]{1,128}")

_request_id: ContextVar[str | None] = ContextVar("request_id", default=None)


def sane(value) -> bool:
    return isinstance(value, str) and SANE.fullmatch(value) is not None


def new_request_id() -> str:
    return uuid.uuid4().hex


def request_id() -> str | None:
    """The id of the request (or job) this code runs for, if any."""
    return _request_id.get()


@contextmanager
def bound(value: str | None) -> Iterator[None]:
    """Run the block as part of the request ``value`` (``None``: of none)."""
    token = _request_id.set(value)
    try:
        yield
    finally:
        _request_id.reset(token)


def bind(value: str | None):
    """Set the id until ``unbind(token)``: for a start and an end in two calls (a job's)."""
    return _request_id.set(value)


def unbind(token) -> None:
    _request_id.reset(token)


class RequestIdFilter(logging.Filter):
    """Writes ``request_id`` on each record (``None`` outside a request); passes them all.

    Django logs a 4xx or 5xx answer once the middleware has returned it, outside the
    request's context: such a record names its request, which holds the id."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "request_id", None) is None:
            record.request_id = _request_id.get() or getattr(
                getattr(record, "request", None), "request_id", None
            )
        return True


# A record's own attributes; anything else on it came from ``extra=`` and is written too.
_STANDARD = {*vars(logging.makeLogRecord({})), "message", "asctime", "request_id", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request_id, then the extras;
    an exception or stack as one string under ``exception`` / ``stack``."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD:
                line.setdefault(key, value)  # an extra never hides one of the fields above
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``time level logger [request id] message``, for a person reading a terminal."""

    def __init__(self, fmt=None, datefmt=None, style="%", **kwargs):
        fmt = fmt or "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"
        super().__init__(fmt, datefmt, style, **kwargs)

    def format(self, record: logging.LogRecord) -> str:
        if getattr(record, "request_id", None) is None:
            record.request_id = "-"
            try:
                return super().format(record)
            finally:
                record.request_id = None
        return super().format(record)
