import pytest
from django.conf import settings

from tests.factories import Flow, ProjectFactory

ON_POSTGRES = settings.DATABASES["default"]["ENGINE"].endswith("postgresql")

postgres_only = pytest.mark.skipif(not ON_POSTGRES, reason="needs PostgreSQL (set DATABASE_URL)")


@pytest.fixture(autouse=True)
def _isolated_media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"


@pytest.fixture
def flow(db):
    """A project with a manager, two agents, a reviewer and a verifier."""
    return Flow(ProjectFactory(slug="FM"))


@pytest.fixture
def other_flow(db):
    """A second project with its own members."""
    return Flow(ProjectFactory(slug="OT"))
