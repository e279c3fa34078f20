"""The ``database`` marker that the second database's run selects (ADR 0015) is on every
test that can reach the test database, and on no other: a test left out of that run must be
one that pytest-django keeps away from the database."""

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
