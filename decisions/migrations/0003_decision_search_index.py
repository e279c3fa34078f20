"""A GIN index for the decision log's full-text search, on PostgreSQL only.

The expression must stay identical to ``decisions.selectors.search_document()``
(tests/decisions/test_search_index.py checks that the planner uses it).
"""

from django.db import migrations

SEARCH_DOCUMENT = (
    "to_tsvector('english'::regconfig, coalesce(title, '') || ' ' || coalesce(decision, '')"
    " || ' ' || coalesce(context, '') || ' ' || coalesce(consequences, ''))"
)


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS decision_search_idx ON decisions_decision USING GIN ({SEARCH_DOCUMENT})"
        )


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP INDEX IF EXISTS decision_search_idx")


class Migration(migrations.Migration):
    dependencies = [("decisions", "0002_initial")]

    operations = [migrations.RunPython(create, drop, elidable=False)]
