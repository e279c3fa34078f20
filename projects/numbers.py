"""Whole numbers from requests: one reading for every page, API call and URL.

``str.isdigit`` and ``int`` accept far more than ASCII digits ("²" is a digit to
``isdigit`` and an error to ``int``; "٣" (Arabic-Indic three) and the full-width three are 3 to ``int``), so a number from a
request is read here and nowhere else: ASCII digits only, no sign, no spaces. An id in
a URL has at most 18 digits, so every id that reaches a query fits the database's bigint.
"""

import re

from django import forms
from django.core.exceptions import ValidationError

WHOLE = re.compile(r"[0-9]+")  # not \d, which takes every script's digits
ID = re.compile(r"[0-9]{1,18}")


def whole_number(text, *, minimum: int = 0) -> int | None:
    """``text`` as a whole number of at least ``minimum``, or None if it is not one."""
    if not isinstance(text, str) or not WHOLE.fullmatch(text):
        return None
    value = int(text)
    return value if value >= minimum else None


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
