"""What an attempt used, as its agent reports it, and what a month of them cost.

An agent reports usage on its heartbeats and its submit as an *increment*: what it used
since its last report (heartbeats repeat, so totals would be ambiguous after a lost
answer; increments are added once each). ``clean_usage`` reads one report and refuses
(400, naming ``usage.<field>``) anything malformed before anything is written;
``add_usage`` adds it to the attempt's totals. The stored totals, which the cost views
read, always have this shape once anything was reported::

    {"model": "the last model reported, or null",
     "models": ["every model reported, in the order first seen"],
     "input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0, "cache_write_tokens": 0,
     "cost_usd": "0.00",          # what the agent reported, a decimal string, 6 places
     "priced_cost_usd": "0.00",   # what the project's price table priced
     "wall_seconds": 0.0,
     "by_model": {"name": {"input_tokens": 0, …, "cost_usd": "0.42" | null,
                           "priced_cost_usd": "0.10" | null}}}

A report may break its tokens and cost down ``by_model``; what its sums hold beyond that
breakdown belongs to its ``model`` (else the attempt's last model, else the unknown
model, ``""``). A model's cost is what the agent reported for it once it reported any;
until then, its tokens are priced from the project's ``prices`` (``Project.prices``:
model → US dollars per million input, output, cache-read and cache-write tokens), and
nothing when the table has no price for it. So an agent that reports its cost only at the
end (Claude Code's result) is priced while it runs and its own figure replaces the priced
one; the two are never added for one model. ``cost_of`` (reported plus priced) is what
the budgets and the cost views count; each view says which part is which.

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
from decimal import ROUND_HALF_UP, Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models import Case, DecimalField, Sum, Value, When
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce
from django.db.models.lookups import Regex

from projects.numbers import usd, usd_text
from projects.services import check_storable

TOKEN_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
FIELDS = ("model", *TOKEN_FIELDS, "cost_usd", "wall_seconds", "by_model")
PRICE_FIELDS = {  # a price entry's key: the tokens it prices
    "input": "input_tokens",
    "output": "output_tokens",
    "cache_read": "cache_read_tokens",
    "cache_write": "cache_write_tokens",
}
MILLION = Decimal(1_000_000)
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
        clean["model"] = _model(usage["model"], "model")
    clean.update(_amounts(usage, ""))
    if "by_model" in usage:
        clean["by_model"] = _by_model(usage["by_model"], clean)
    _within_the_limit(usage.get("cost_usd"), "cost_usd")
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


def _model(model, name: str) -> str:
    if not isinstance(model, str) or not model.strip() or len(model) > MAX_MODEL:
        _refuse(name, f"the model's name, 1 to {MAX_MODEL} characters, not blank")
    check_storable(model, f"usage.{name}")
    return model.strip()


def _amounts(usage: dict, prefix: str) -> dict:
    """The token counts and the cost of ``usage`` (a report, or one model's part), checked."""
    clean = {}
    for name in TOKEN_FIELDS:
        if name in usage:
            value = usage[name]
            if isinstance(value, bool) or not isinstance(value, int):
                _refuse(prefix + name, "a whole number of tokens")
            if not 0 <= value <= MAX_TOKENS:
                _refuse(prefix + name, f"from 0 to {MAX_TOKENS} tokens")
            clean[name] = value
    if "cost_usd" in usage:
        cost = usd(usage["cost_usd"], places=COST_PLACES, digits=COST_DIGITS)
        if cost is None:
            _refuse(
                prefix + "cost_usd",
                'US dollars below a million, as a number or a string of digits ("0.0125")',
            )
        clean["cost_usd"] = cost
    return clean


UNNAMED = "(unnamed)"


def _model_key(name: str) -> str:
    """A model's name as a key of ``by_model``: trimmed and cut to ``MAX_MODEL``, or
    ``UNNAMED`` when blank; NUL refused. Any other name is taken, as the schema says:
    OpenAPI 3.0 cannot bound an object's keys, so the API must not refuse what it lets pass."""
    check_storable(name, "usage.by_model")
    return name.strip()[:MAX_MODEL] or UNNAMED


def _by_model(by_model, clean: dict) -> dict:
    """``by_model`` checked, and the report's sums filled in from it: a sum not given, or
    given below its breakdown, is the breakdown's."""
    if not isinstance(by_model, dict) or len(by_model) > MAX_MODELS:
        raise ValidationError(
            {"usage.by_model": f"an object of at most {MAX_MODELS} models, each with its usage"}
        )
    parts = {}
    for name, part in by_model.items():
        model = _model_key(name)
        if not isinstance(part, dict):
            _refuse(f"by_model.{model[:50]}", "an object with any of the token counts and cost_usd")
        for key in part:
            if key not in (*TOKEN_FIELDS, "cost_usd"):
                _refuse(f"by_model.{model[:50]}.{str(key)[:50]}", "unknown field")
        parts[model] = _amounts(part, f"by_model.{model[:50]}.")
        _within_the_limit(part.get("cost_usd"), f"by_model.{model[:50]}.cost_usd")
    for name in (*TOKEN_FIELDS, "cost_usd"):
        total = sum((part.get(name, 0) for part in parts.values()), 0)
        # A sum below its breakdown is raised to it: the parts are the finer report, and a
        # schema cannot say that one figure bounds others, so the API does not refuse it.
        if total and (name not in clean or clean[name] < total):
            clean[name] = total
    return parts


def _within_the_limit(amount, name: str) -> None:
    """One figure of cost as sent, at most ``FACTORY_USAGE_MAX_REPORT_USD``."""
    limit = settings.FACTORY_USAGE_MAX_REPORT_USD
    # The amount as sent, not as cut to six places: "100.0000001" is above 100.
    sent = _exact(amount) if amount is not None else 0
    if sent > limit:
        _refuse(
            name,
            f"one report may cost at most {limit} USD (FACTORY_USAGE_MAX_REPORT_USD, set by"
            f" the site's operator), not {usd_text(sent)}: report what was used since the"
            " last report",
        )


def _exact(amount) -> Decimal:
    """An amount ``usd`` accepted, as sent (a float by its shortest text)."""
    return Decimal(repr(amount)) if isinstance(amount, float) else Decimal(amount)


def empty() -> dict:
    return {
        "model": None,
        "models": [],
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "cost_usd": "0.00",
        "priced_cost_usd": "0.00",
        "wall_seconds": 0.0,
        "by_model": {},
    }


def _empty_model() -> dict:
    return {**dict.fromkeys(TOKEN_FIELDS, 0), "cost_usd": None, "priced_cost_usd": None}


def _seeded_by_model(totals: dict) -> dict:
    """An attempt's per-model usage; for totals stored before the breakdown existed,
    everything under their last model, as reported."""
    if "by_model" in totals:
        return {name: dict(part) for name, part in totals["by_model"].items()}
    if not totals:
        return {}
    cost = Decimal(totals.get("cost_usd") or 0)
    return {
        totals.get("model") or "": {
            **_empty_model(),
            **{name: totals.get(name, 0) for name in TOKEN_FIELDS},
            "cost_usd": usd_text(cost) if cost else None,
        }
    }


def price_of(tokens: dict, price: dict | None) -> Decimal | None:
    """What ``tokens`` (a model's counts) cost at ``price`` (a ``Project.prices`` entry:
    US dollars per million tokens); None without a price."""
    if not price:
        return None
    total = sum(
        (Decimal(price.get(key) or 0) * tokens.get(name, 0) for key, name in PRICE_FIELDS.items()),
        Decimal(0),
    )
    return (total / MILLION).quantize(Decimal(1).scaleb(-COST_PLACES), rounding=ROUND_HALF_UP)


def add_usage(totals: dict, increment: dict, prices: dict | None = None) -> dict:
    """``totals`` (an attempt's ``usage``, ``{}`` before the first report) plus one
    cleaned ``increment``, in the stored shape, its tokens without a reported cost priced
    from ``prices`` (the project's)."""
    added = {**empty(), **(totals or {})}
    by_model = _seeded_by_model(totals or {})
    added["models"] = list(added["models"])
    model = increment.get("model")
    if model is not None:
        added["model"] = model
    parts = {name: dict(part) for name, part in increment.get("by_model", {}).items()}
    # What the sums hold beyond the breakdown is the report's model's.
    rest = {
        name: increment.get(name, 0) - sum(p.get(name, 0) for p in parts.values())
        for name in TOKEN_FIELDS
    }
    rest_cost = None
    if "cost_usd" in increment:
        rest_cost = increment["cost_usd"] - sum(
            (p.get("cost_usd", Decimal(0)) for p in parts.values()), Decimal(0)
        )
    if any(rest.values()) or rest_cost:
        owner = parts.setdefault(added["model"] or "", {})
        for name, value in rest.items():
            owner[name] = owner.get(name, 0) + value
        if rest_cost:
            owner["cost_usd"] = owner.get("cost_usd", Decimal(0)) + rest_cost
    for name, part in parts.items():
        if name and name not in added["models"] and len(added["models"]) < MAX_MODELS:
            added["models"].append(name)
        stored = {**_empty_model(), **by_model.get(name, {})}
        for field in TOKEN_FIELDS:
            stored[field] += part.get(field, 0)
        if "cost_usd" in part:
            stored["cost_usd"] = usd_text(Decimal(stored["cost_usd"] or 0) + part["cost_usd"])
        elif stored["cost_usd"] is None:
            priced = price_of(part, (prices or {}).get(name))
            if priced is not None:
                stored["priced_cost_usd"] = usd_text(
                    Decimal(stored["priced_cost_usd"] or 0) + priced
                )
        by_model[name] = stored
    for field in TOKEN_FIELDS:
        added[field] += increment.get(field, 0)
    added["by_model"] = by_model
    added["cost_usd"] = usd_text(
        sum((Decimal(p["cost_usd"]) for p in by_model.values() if p["cost_usd"]), Decimal(0))
    )
    added["priced_cost_usd"] = usd_text(
        sum(
            (
                Decimal(p["priced_cost_usd"])
                for p in by_model.values()
                if p["cost_usd"] is None and p["priced_cost_usd"]
            ),
            Decimal(0),
        )
    )
    added["wall_seconds"] = round(added["wall_seconds"] + increment.get("wall_seconds", 0.0), 3)
    return added


def cost_of(usage: dict) -> Decimal:
    """What an attempt's ``usage`` totals cost: reported plus priced (0 when none)."""
    usage = usage or {}
    return Decimal(usage.get("cost_usd") or 0) + Decimal(usage.get("priced_cost_usd") or 0)


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


# --- Sums in the database: the budgets (tasks.selectors) and the cost views (oversight.costs)

AMOUNT = DecimalField(max_digits=24, decimal_places=6)
# What a self-reported amount may look like to count; anything else (a sign, an exponent,
# words) counts as 0 rather than failing the cast on PostgreSQL.
DECIMAL_TEXT = r"^[0-9]{1,15}(\.[0-9]{1,12})?$"
WHOLE_TEXT = r"^[0-9]{1,15}$"


def _reported(key: str, pattern: str, field):
    """``usage[key]`` as a number of type ``field`` when it is one, else 0."""
    text = KeyTextTransform(key, "usage")
    return Case(
        When(Regex(text, pattern), then=Cast(text, field)),
        default=Value(0, output_field=field),
        output_field=field,
    )


def usage_sum(key: str, pattern: str = DECIMAL_TEXT, field=AMOUNT):
    """The sum of ``usage[key]`` over the rows, what is not a number counting 0."""
    return Coalesce(Sum(_reported(key, pattern, field)), Value(0, output_field=field))
