"""``/api/schema/`` is generated once per process and served alike to every caller; a
change of settings (a test's) drops it."""

import pytest
from django.test import override_settings
from drf_spectacular.generators import SchemaGenerator

from factory_site import schema

pytestmark = pytest.mark.django_db


@pytest.fixture
def generations(monkeypatch):
    made = []
    real = SchemaGenerator.get_schema

    def counted(self, *args, **kwargs):
        made.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SchemaGenerator, "get_schema", counted)
    schema._generated.clear()
    return made


def test_the_schema_is_generated_once_and_served_alike(client, generations):
    first = client.get("/api/schema/?format=json")
    second = client.get("/api/schema/")

    assert (first.status_code, second.status_code, len(generations)) == (200, 200, 1)
    assert first.json()["info"]["title"] == "Factory Memory API"
    assert second["Content-Disposition"] == 'inline; filename="Factory Memory API.yaml"'
    assert b"title: Factory Memory API" in second.content


def test_a_change_of_settings_generates_it_again(client, generations):
    client.get("/api/schema/?format=json")

    with override_settings(FACTORY_MAX_ATTEMPTS_DEFAULT=7):
        again = client.get("/api/schema/?format=json")

    assert (again.status_code, len(generations)) == (200, 2)
