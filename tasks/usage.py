"""What an attempt used, as its agent reports it, and what a month of them cost.

An agent reports usage on its heartbeats and its submit as an *increment*: what it used
since its last report (heartbeats repeat, so totals would be ambiguous after a lost
answer; increments are added once each). ``clean_usage`` reads one report and refuses
(400, naming ``usage.<field>``) anything malformed before anything is written;
``add_usage`` adds it to the attempt's totals. The stored totals, which the cost views
read, always have this shape once anything was reported::

    {"model": "the last model reported, or null",
     "models": ["every model reported, in the order first seen"],
     "input_tokens": 0, "output_tokens": 0,
     "cost_usd": "0.00",   # a decimal string, up to 6 places
     "wall_seconds": 0.0}

Everything here is self-reported: it is shown as such and never trusted for more than
a budget, which an agent can only use up faster by over-reporting. So one report may
cost at most ``FACTORY_USAGE_MAX_REPORT_USD`` (a slip of the agent's meter, "999999",
is refused rather than spending a project's month), and a manager may void what an
attempt reported (``tasks.attempts.attempt_usage_void``): it moves to the attempt's
``usage_voided`` and ``usage`` starts again from ``{}``, so everything that reads
``usage`` (the budgets, the cost views) stops counting it without knowing about voids.

A project's month is the calendar month in UTC; an attempt counts in the month it
started (``month_start``), so the spend of a month never changes once it is over.
"""

from datetime import UTC, datetime
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError

from projects.numbers import usd, usd_text
from projects.services import check_storable

FIELDS = ("model", "input_tokens", "output_tokens", "cost_usd", "wall_seconds")
MAX_TOKENS = 10**12  # per report
COST_DIGITS = 6  # US dollars per report: below a million
MAX_SECONDS = 10**7  # per report, about 115 days
MAX_MODEL = 100
MAX_MODELS = 20  # distinct model names kept per attempt; later ones are still ``model``
COST_PLACES = 6


def _refuse(name: str, why: str):
    raise ValidationError({f"usage.{name}": why})


def clean_usage(usage) -> dict:
    """One report as an increment: ``{}`` for none (null or an empty object), else the
    fields given, each checked; 400 naming ``usage.<field>`` otherwise."""
    if usage is None:
        return {}
    if not isinstance(usage, dict):
        raise ValidationError({"usage": f"an object with any of {', '.join(FIELDS)}"})
    for name in usage:
        if name not in FIELDS:
            _refuse(str(name)[:50], "unknown field")
    clean = {}
    if "model" in usage:
        model = usage["model"]
        if not isinstance(model, str) or not model.strip() or len(model) > MAX_MODEL:
            _refuse("model", f"the model's name, 1 to {MAX_MODEL} characters, not blank")
        check_storable(model, "usage.model")
        clean["model"] = model.strip()
    for name in ("input_tokens", "output_tokens"):
        if name in usage:
            value = usage[name]
            if isinstance(value, bool) or not isinstance(value, int):
                _refuse(name, "a whole number of tokens")
            if not 0 <= value <= MAX_TOKENS:
                _refuse(name, f"from 0 to {MAX_TOKENS} tokens")
            clean[name] = value
    if "cost_usd" in usage:
        cost = usd(usage["cost_usd"], places=COST_PLACES, digits=COST_DIGITS)
        if cost is None:
            _refuse(
                "cost_usd",
                'US dollars below a million, as a number or a string of digits ("0.0125")',
            )
        # The amount as sent, not as cut to six places: "100.0000001" is above 100.
        limit, sent = settings.FACTORY_USAGE_MAX_REPORT_USD, _exact(usage["cost_usd"])
        if sent > limit:
            _refuse(
                "cost_usd",
                f"one report may cost at most {limit} USD (FACTORY_USAGE_MAX_REPORT_USD, set by"
                f" the site's operator), not {usd_text(sent)}: report what was used since the"
                " last report",
            )
        clean["cost_usd"] = cost
    if "wall_seconds" in usage:
        seconds = usage["wall_seconds"]
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not 0 <= seconds <= MAX_SECONDS  # NaN compares false: refused too
        ):
            _refuse("wall_seconds", f"seconds from 0 to {MAX_SECONDS}")
        clean["wall_seconds"] = round(float(seconds), 3)
    return clean


def _exact(amount) -> Decimal:
    """An amount ``usd`` accepted, as sent (a float by its shortest text)."""
    return Decimal(repr(amount)) if isinstance(amount, float) else Decimal(amount)


def empty() -> dict:
    return {
        "model": None,
        "models": [],
        "input_tokens": 0,
        "output_tokens": 0,
        "cost_usd": "0.00",
        "wall_seconds": 0.0,
    }


def add_usage(totals: dict, increment: dict) -> dict:
    """``totals`` (an attempt's ``usage``, ``{}`` before the first report) plus one
    cleaned ``increment``, in the stored shape."""
    added = {**empty(), **(totals or {})}
    added["models"] = list(added["models"])
    model = increment.get("model")
    if model is not None:
        added["model"] = model
        if model not in added["models"] and len(added["models"]) < MAX_MODELS:
            added["models"].append(model)
    for name in ("input_tokens", "output_tokens"):
        added[name] += increment.get(name, 0)
    cost = cost_of(added) + increment.get("cost_usd", Decimal(0))
    added["cost_usd"] = usd_text(cost)
    added["wall_seconds"] = round(added["wall_seconds"] + increment.get("wall_seconds", 0.0), 3)
    return added


def cost_of(usage: dict) -> Decimal:
    """The cost an attempt's ``usage`` totals record (0 when none was reported)."""
    return Decimal((usage or {}).get("cost_usd") or 0)


def shown(usage: dict) -> dict:
    """An attempt's ``usage`` as the API shows it: the stored shape, marked self-reported."""
    return {**empty(), **(usage or {}), "self_reported": True}


def shown_with_void(usage: dict, voided: dict) -> dict:
    """An attempt's ``usage`` as the API shows it (``shown``), with ``voided``: None, or
    ``{by, at, reason, usage}`` when a manager voided what it had reported until then,
    ``usage`` being those totals as the agent reported them, counted nowhere."""
    answer = {**shown(usage), "voided": None}
    if voided:
        answer["voided"] = {
            "by": voided.get("by"),
            "at": voided.get("at"),
            "reason": voided.get("reason", ""),
            "usage": shown(voided.get("usage")),
        }
    return answer


def month_start(now: datetime) -> datetime:
    """The first instant of ``now``'s calendar month in UTC."""
    return now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def month_name(now: datetime) -> str:
    """``2026-12``: the month a budget's spend is counted in."""
    return month_start(now).strftime("%Y-%m")
