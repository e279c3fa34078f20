"""The world of tests.hostile.world, built once for each module of this folder; each test
is rolled back to it."""

import shutil
from pathlib import Path

import pytest
from django.conf import settings

from tests.conftest import module_media, world_for_the_module
from tests.hostile.world import World


@pytest.fixture(scope="module")
def _world_media(tmp_path_factory):
    """Where the module's world keeps its evidence files while it is built."""
    with module_media(tmp_path_factory):
        yield Path(settings.MEDIA_ROOT)


@pytest.fixture
def _isolated_media(settings, tmp_path, _world_media):
    """Each test's own media folder, holding the world's evidence files as it found them:
    its assertions on stored files see what they saw when each test built its world."""
    settings.MEDIA_ROOT = tmp_path / "media"
    shutil.copytree(_world_media, settings.MEDIA_ROOT)


@pytest.fixture(scope="module")
def _world(django_db_setup, django_db_blocker, _world_media):
    with world_for_the_module(django_db_blocker, World) as world:
        yield world


@pytest.fixture
def world(db, _world):
    """The world, built once for the module; each test is rolled back to it."""
    return _world


@pytest.fixture
def world_with_evidence(world):
    world.evidence = world.flow.attach(world.attempt)
    yield world
    del world.evidence  # the world outlives the test; its evidence row does not
