"""The decision log's full-text search uses its GIN index on PostgreSQL."""

import importlib

import pytest
from django.db import connection

from decisions.models import Decision
from decisions.selectors import search_decisions, search_document
from tests.conftest import postgres_only


def test_the_migration_indexes_the_same_expression_the_search_uses():
    migration = importlib.import_module("decisions.migrations.0003_decision_search_index")

    assert search_document() == migration.SEARCH_DOCUMENT


@postgres_only
@pytest.mark.django_db
def test_the_planner_uses_the_index_for_a_search(flow):
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")  # a tiny table: make the index the only way
    queryset = search_decisions(Decision.objects.all(), "leases claims")

    plan = queryset.explain()

    assert "decision_search_idx" in plan
