"""A project's price table: what its agents' models cost, for usage reported without a cost.

``Project.prices`` maps a model's name (as agents report it; no NUL) to US
dollars per million ``input``, ``output``, ``cache_read`` and ``cache_write`` tokens
(decimal strings, at most 6 places, below 100 000; a missing kind costs nothing) and
``set_on``, the date (``YYYY-MM-DD``) the manager set it: a priced figure is only as good
as the price at the time. ``tasks.usage`` prices with it; ``clean_prices`` checks a
whole table (400 naming ``prices.<model>.<field>``), at most ``MAX_MODELS`` models.
"""

import re
from datetime import date

from django.core.exceptions import ValidationError

from projects.numbers import usd, usd_pattern

KINDS = ("input", "output", "cache_read", "cache_write")
MAX_MODELS = 200
PRICE_DIGITS = 5
PRICE_PLACES = 6
DATE_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"


def schema() -> dict:
    """The table as ``clean_prices`` takes it, for the API's schema."""
    price = {"type": "string", "pattern": usd_pattern(PRICE_DIGITS)}
    return {
        "type": "object",
        "maxProperties": MAX_MODELS,
        "additionalProperties": {
            "type": "object",
            "additionalProperties": False,
            "required": ["set_on"],
            "minProperties": 2,
            "properties": {
                **{kind: price for kind in KINDS},
                "set_on": {"type": "string", "format": "date"},
            },
        },
    }


def clean_prices(value) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > MAX_MODELS:
        raise ValidationError(
            {"prices": f"an object of at most {MAX_MODELS} models, each with its prices"}
        )
    clean = {}
    for model, entry in value.items():
        where = f"prices.{model[:50]}".replace("\x00", "\\0")
        # Any name but one holding NUL (a database's JSON cannot): OpenAPI 3.0 cannot bound
        # an object's keys, so the schema could not say more, and a name no agent reports
        # prices nothing.
        if "\x00" in model:
            raise ValidationError({where: "a model's name, without NUL characters"})
        if not isinstance(entry, dict):
            raise ValidationError({where: f"an object with set_on and any of {', '.join(KINDS)}"})
        unknown = set(entry) - {*KINDS, "set_on"}
        if unknown:
            raise ValidationError({f"{where}.{sorted(unknown)[0][:50]}": "unknown field"})
        try:
            if not re.fullmatch(DATE_PATTERN, entry.get("set_on")):
                raise ValueError("not YYYY-MM-DD")  # fromisoformat takes 20261201 too
            set_on = date.fromisoformat(entry["set_on"])
        except (TypeError, ValueError):
            raise ValidationError(
                {f"{where}.set_on": "the date the price was set, YYYY-MM-DD"}
            ) from None
        prices = {}
        for kind in KINDS:
            if kind in entry:
                amount = usd(entry[kind], places=PRICE_PLACES, digits=PRICE_DIGITS)
                if amount is None or not isinstance(entry[kind], str):
                    raise ValidationError(
                        {f"{where}.{kind}": 'US dollars per million tokens, a string ("3.00")'}
                    )
                prices[kind] = format(amount.normalize(), "f")
        if not prices:
            raise ValidationError({where: f"at least one of {', '.join(KINDS)}"})
        clean[model] = {**prices, "set_on": set_on.isoformat()}
    return clean
