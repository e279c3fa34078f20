"""A task's allowed_paths: the schema's pattern for an entry says exactly what the server takes."""

import re

from django.core.exceptions import ValidationError
from hypothesis import given, settings
from hypothesis import strategies as st
from rest_framework import serializers

from projects.paths import ALLOWED_PATH_PATTERN, clean_allowed_paths
from tasks.api import AllowedPathField

PATTERN = re.compile(ALLOWED_PATH_PATTERN)
# The characters the rules turn on, so that most drawn paths meet one of them.
TRICKY = st.text(st.sampled_from(list("a./\\* \t\n\x00\x1c\x85\u00a0\u2028")), max_size=10)


def taken(path: str) -> bool:
    """Whether the API takes ``path`` as an entry: its field, then the service."""
    try:
        clean_allowed_paths([AllowedPathField(max_length=500).run_validation(path)])
    except (ValidationError, serializers.ValidationError):
        return False
    return True


@settings(max_examples=3000, derandomize=True, database=None)
@given(st.one_of(TRICKY, st.text(max_size=12)))
def test_the_schema_pattern_admits_exactly_the_paths_the_api_takes(path):
    assert bool(PATTERN.search(path)) == taken(path)


def test_an_allowed_path_is_relative_without_a_dotdot_segment_or_a_backslash():
    admitted = ["src/**", " docs/*.md ", "a/..b", "a/.. /b", ".hidden/x"]
    refused = ["/etc", " /etc", "..", "a/..", "a/.. ", "../x", "a\\b", "   ", "", "a\x00"]

    assert [path for path in admitted if PATTERN.search(path) and taken(path)] == admitted
    assert [path for path in refused if PATTERN.search(path) or taken(path)] == []
