"""Django's own checks of the code, run inside the suite: the models and their migrations
agree, and the OpenAPI schema the API serves is valid with no warning (ADR 0005).

They ran as two ``manage.py`` commands before pytest, each starting Django for itself
(about 14 s of the suite's wall time, with nothing else running beside them); here they
share a worker's Django and run beside the other tests.
"""

import io
import os

import pytest
from django.core.management import call_command
from drf_spectacular.drainage import GENERATOR_STATS


@pytest.mark.django_db
def test_every_model_change_has_its_migration():
    said = io.StringIO()

    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=said, stderr=said)
    except SystemExit as exited:  # makemigrations --check exits 1 when one is missing
        pytest.fail(
            f"a migration is missing (makemigrations exited {exited.code}):\n{said.getvalue()}"
        )

    assert said.getvalue() == "No changes detected\n"


def test_the_openapi_schema_is_valid_and_generated_without_a_warning():
    GENERATOR_STATS.reset()

    call_command("spectacular", "--validate", "--fail-on-warn", "--file", os.devnull)

    assert (GENERATOR_STATS._warn_cache, GENERATOR_STATS._error_cache) == ({}, {})
