"""The ``database`` marker that the second database's run selects (ADR 0015) is on every
test that can reach the test database, and on no other: a test left out of that run must be
one that pytest-django keeps away from the database."""

from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from tests.conftest import reaches_the_database


def test_a_test_without_the_marker_cannot_reach_the_database(request):
    assert request.node.get_closest_marker("database") is None
    with pytest.raises(RuntimeError, match="Database access not allowed"):
        get_user_model().objects.count()


@pytest.mark.django_db
def test_a_test_marked_django_db_has_the_marker(request):
    assert request.node.get_closest_marker("database") is not None
    assert get_user_model().objects.count() == 0


def test_a_fixture_that_opens_the_database_gives_the_marker(request, flow):
    assert request.node.get_closest_marker("database") is not None
    assert flow.project.slug == "FM"


def test_the_rule_reads_the_whole_closure_of_fixtures(request):
    class Item:
        fixturenames = ("settings", "api", "db")

        @staticmethod
        def get_closest_marker(name):
            return None

    assert reaches_the_database(Item)
    Item.fixturenames = ("settings", "tmp_path")
    assert not reaches_the_database(Item)


def test_no_module_left_out_of_the_postgresql_run_holds_a_test_that_runs_only_there():
    tests = Path(__file__).parent
    mark = "pytest.mark." + "engine_neutral"  # not this file's own text
    neutral = [
        path.relative_to(tests).as_posix()
        for path in sorted(tests.rglob("test_*.py"))
        if mark in path.read_text()
    ]
    assert neutral == [
        "client/test_agents_work.py",
        "client/test_cli.py",
        "client/test_work.py",
        "hostile/test_mass_assignment_decisions.py",
        "hostile/test_mass_assignment_schema.py",
        "hostile/test_mass_assignment_tasks.py",
        "hostile/test_mass_assignment_tokens.py",
        "test_authorization.py",
    ]
    for name in neutral:
        text = (tests / name).read_text()
        assert "postgres_only" not in text and "ON_POSTGRES" not in text, name
