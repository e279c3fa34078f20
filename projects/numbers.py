"""Whole numbers from requests: one reading for every page, API call and URL.

``str.isdigit`` and ``int`` accept far more than ASCII digits ("²" is a digit to
``isdigit`` and an error to ``int``; "٣" (Arabic-Indic three) and the full-width three are 3 to ``int``), so a number from a
request is read here and nowhere else: ASCII digits only, no sign, no spaces, at most 18
of them, so every number that reaches a query fits the database's bigint (an id in a URL
too) and none is too long for ``int`` to read (past 4,300 digits it raises ValueError).
Amounts of money (``usd``) are read the same way: digits and a fraction, never a sign or
an exponent, and never through a binary float.
"""

import math
import re
from decimal import ROUND_DOWN, Decimal

from django import forms
from django.core.exceptions import ValidationError

# Not \d, which takes every script's digits; leading zeros count, so the text is short.
WHOLE = re.compile(r"[0-9]{1,18}")
# The largest whole number a request may give (18 digits: every one fits a bigint).
WHOLE_MAX = 10**18 - 1
ID = WHOLE


def whole_number(text, *, minimum: int = 0, maximum: int | None = None) -> int | None:
    """``text`` as a whole number from ``minimum`` (to ``maximum``, when given), or None if
    it is not one: ASCII digits, at most 18."""
    if not isinstance(text, str) or not WHOLE.fullmatch(text):
        return None
    value = int(text)
    return value if value >= minimum and (maximum is None or value <= maximum) else None


def query_number(request, name: str, *, minimum: int = 1) -> int | None:
    """A page's query parameter as a whole number, or None when absent or not one.

    Pages ignore a malformed number and show their default, as for an unknown filter;
    the API refuses one instead (``projects.rest.whole_number_param``).
    """
    return whole_number(request.GET.get(name), minimum=minimum)


class IdConverter:
    """``<id:…>`` in URLs: a database id or a version number, ASCII digits that fit a
    bigint. A longer number never reaches a view, so it is a 404, not a database error."""

    regex = ID.pattern

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value) -> str:
        return str(value)


class WholeNumberField(forms.IntegerField):
    """A form's whole number, read by ``whole_number``: ASCII digits only."""

    def to_python(self, value):
        if value in self.empty_values:
            return None
        number = whole_number(str(value).strip())
        if number is None:
            raise ValidationError(self.error_messages["invalid"], code="invalid")
        return number


def usd(value, *, places: int, digits: int) -> Decimal | None:
    """``value`` as an amount of US dollars, cut to ``places`` decimals; None if it is not one.

    A string is ASCII digits, at most ``digits`` of them before an optional fraction (no
    sign, no exponent, no spaces); a JSON number (``int`` or ``float``, read by its
    shortest text: 0.1 is 0.1) is from 0 to ``10**digits - 1``; a ``Decimal`` (a form's)
    is finite, from 0 and below ``10**digits``. True, NaN and infinities are refused.
    Cutting (never rounding up) keeps every accepted amount within ``digits``.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, Decimal):
        amount = value if value.is_finite() and 0 <= value < 10**digits else None
    elif isinstance(value, int | float):
        if not math.isfinite(value) or not 0 <= value <= 10**digits - 1:
            return None
        amount = Decimal(value) if isinstance(value, int) else Decimal(repr(value))
    elif isinstance(value, str) and re.fullmatch(usd_pattern(digits), value):
        amount = Decimal(value)
    else:
        return None
    if amount is None:
        return None
    return amount.quantize(Decimal(1).scaleb(-places), rounding=ROUND_DOWN)


def usd_pattern(digits: int) -> str:
    """The strings ``usd`` takes, as a schema's pattern."""
    return rf"^[0-9]{{1,{digits}}}(\.[0-9]{{1,20}})?$"


def usd_pattern_at_most(limit: int, digits: int) -> str:
    """The strings ``usd_pattern(digits)`` takes whose amount is at most ``limit`` whole
    dollars (compared exactly, before any cutting), as a schema's pattern: a schema cannot
    compare a string with a number, but it can spell out the strings that are small enough.

    The whole part may have leading zeros (``usd`` reads "0042"); what is below ``limit``
    takes any fraction, what equals it only zeros after the point.
    """
    if not 0 <= limit < 10**digits:
        raise ValueError(f"the limit {limit} does not fit {digits} digits")
    text = str(limit)
    size = len(text)

    def zeros(most: int, least: int = 0) -> str:
        """Leading zeros, ``least`` to ``most`` of them."""
        if most <= 0:
            return ""
        return "0" if (least, most) == (1, 1) else f"0{{{least},{most}}}"

    def digit_span(low: int, high: int) -> str:
        return str(low) if low == high else f"[{low}-{high}]"

    def any_digits(count: int) -> str:
        return "" if count == 0 else "[0-9]" if count == 1 else f"[0-9]{{{count}}}"

    below = []
    if limit > 0:
        below.append(zeros(digits, 1))  # zero itself
    for length in range(1, size):  # fewer significant digits than the limit
        below.append(zeros(digits - length) + "[1-9]" + any_digits(length - 1))
    for place in range(size):  # as many digits: equal up to ``place``, smaller there
        low, high = (1 if place == 0 else 0), int(text[place]) - 1
        if low <= high:
            below.append(
                zeros(digits - size)
                + text[:place]
                + digit_span(low, high)
                + any_digits(size - place - 1)
            )
    equal = zeros(digits - size) + text + r"(?:\.0{1,20})?"
    if not below:
        return rf"^{equal}$"
    return rf"^(?:(?:{'|'.join(below)})(?:\.[0-9]{{1,20}})?|{equal})$"


def usd_text(amount: Decimal) -> str:
    """An amount as the API writes it: plain digits, no exponent, no trailing zeros
    past the cents ("12.5" → "12.50", "0.000300" → "0.0003")."""
    whole, _, fraction = format(amount, "f").partition(".")
    return f"{whole}.{fraction.rstrip('0').ljust(2, '0')}"


def clean_budget(value, name: str, *, digits: int) -> Decimal | None:
    """A budget in US dollars (cents; more decimals are cut), or None for no limit; 400
    naming ``name`` for anything else: a sign, an exponent, text that is not a number."""
    if value is None:
        return None
    amount = usd(value, places=2, digits=digits)
    if amount is None:
        raise ValidationError(
            {
                name: f'US dollars, at most {digits} digits before the point, e.g. "250" or'
                ' "99.50"; null for no limit'
            }
        )
    return amount
