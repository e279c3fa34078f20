import logging
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import uvicorn
from django.conf import settings
from django.db import transaction
from django.test import override_settings

from factory_site.celery import app as celery_app
from projects.logs import RequestIdFilter
from tests.factories import Flow, ProjectFactory

ON_POSTGRES = settings.DATABASES["default"]["ENGINE"].endswith("postgresql")
TESTS = Path(__file__).parent

# What kind of test each file holds, said once: `make test-fast` leaves these out, and
# pytest-xdist (`--dist loadgroup`) runs each group on one worker, one test at a time.
# "machine": the sandbox's user has one process limit however many sandboxes run, and
# the real-worker tests share Redis databases (tests/workers.py).
KINDS = {
    "browser": ("ui/",),
    "sandbox": ("runner/", "landing/", "client/test_work.py", "demo/test_seed_demo.py"),
    "workers": (
        "runner/test_worker.py",
        "evidence/test_worker.py",
        "events/test_worker.py",
        "landing/test_killed.py",
    ),
    "slow": (
        "test_schemathesis.py",
        "test_numbers.py",
        "hostile/",  # hostile inputs and mass assignment
        "test_hostile_pages.py",
        "test_authorization.py",
        "tasks/test_commands.py",
        "test_layout_migration.py",
        "evidence/test_memory.py",  # half-gigabyte reports, in bounded memory
    ),
}
GROUPS = {"sandbox": "machine", "workers": "machine"}


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """A base folder of this session's own, unless one was given: pytest makes its shared
    one (/tmp/pytest-of-USER) private again at every session's start, which would shut the
    sandbox's user out of the folders of another session running at the same time
    (``open_to_the_sandbox``). xdist's workers get theirs inside it."""
    if config.option.basetemp is None and not hasattr(config, "workerinput"):
        config.option.basetemp = tempfile.mkdtemp(prefix="factory-tests-")
        config._factory_basetemp = config.option.basetemp


def pytest_unconfigure(config):
    made = getattr(config, "_factory_basetemp", None)
    if made is not None:
        shutil.rmtree(made, ignore_errors=True)


# What lets a test reach the test database: pytest-django blocks it for every other test.
# (Not ``django_db_blocker``: pytest-django's own autouse fixtures ask for it in every test;
# a module-scoped fixture that unblocks with it serves tests that ask for ``db``.)
DATABASE_FIXTURES = {
    "db",
    "transactional_db",
    "django_db_setup",
    "django_db_reset_sequences",
    "django_db_serialized_rollback",
    "live_server",
    "client",
    "admin_client",
    "admin_user",
    "django_user_model",
}


def reaches_the_database(item) -> bool:
    """Whether the test can reach the test database: it is marked ``django_db`` or asks for
    a fixture that opens it (``fixturenames`` is the whole closure of what it asks for)."""
    return item.get_closest_marker("django_db") is not None or bool(
        DATABASE_FIXTURES & set(getattr(item, "fixturenames", ()))
    )


def pytest_itemcollected(item):
    # Here, not in pytest_collection_modifyitems: pytest-xdist reads the groups there.
    where = item.path.relative_to(TESTS).as_posix()
    for kind, places in KINDS.items():
        if any(where.startswith(place) for place in places):
            item.add_marker(kind)
            if kind in GROUPS:
                item.add_marker(pytest.mark.xdist_group(GROUPS[kind]))
    if reaches_the_database(item):
        # The second database's run takes only these (ADR 0015): a test that cannot reach
        # the database answers the same whichever one the settings name.
        item.add_marker("database")


def pytest_ignore_collect(collection_path, config):
    # A file whose every test `-m "not KIND"` deselects need not even be imported: the
    # inner loop (`make test-fast`) then skips loading the API schema for the fuzzer (30 s).
    expression = config.getoption("markexpr") or ""
    left_out = [kind for kind in KINDS if f"not {kind}" in expression]
    if not left_out:
        return None
    try:
        where = Path(collection_path).relative_to(TESTS).as_posix()
    except ValueError:
        return None
    if Path(collection_path).is_dir():
        where += "/"
    places = [place for kind in left_out for place in KINDS[kind]]
    return True if any(where.startswith(place) for place in places) else None


postgres_only = pytest.mark.skipif(not ON_POSTGRES, reason="needs PostgreSQL (set DATABASE_URL)")


@pytest.fixture(autouse=True)
def _isolated_media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"


def open_to_the_sandbox(path: Path) -> Path:
    """``path``, which the sandbox's user may now pass through (pytest makes its base
    folder private)."""
    for folder in (path, *path.parents):
        if folder == Path("/tmp") or folder == Path("/"):
            break
        folder.chmod(folder.stat().st_mode | 0o711)
    return path


@pytest.fixture(autouse=True)
def _isolated_runner_root(settings, tmp_path):
    """Each test's runner keeps its mirrors and workspaces in a folder of its own."""
    settings.FACTORY_RUNNER_ROOT = open_to_the_sandbox(tmp_path) / "runner"


@contextmanager
def world_for_the_module(django_db_blocker, build):
    """``build()``'s world, made once for a module and never committed.

    It is built inside a transaction that stays open while the module's tests run: each
    test (``django_db``, not transactional) runs in a savepoint inside it and is rolled back
    to the world, and the world is rolled back after the last test. As with a world built
    in every test, nothing commits, so no on-commit job runs. Its files live in one media
    folder for the module (the world's evidence outlives a test), so a module using this
    overrides the ``_isolated_media`` fixture with ``module_media``.
    """
    with django_db_blocker.unblock():
        outer = transaction.atomic()
        outer.__enter__()
        try:
            world = build()
        except BaseException:
            transaction.set_rollback(True)  # leave no open block, and commit nothing
            outer.__exit__(None, None, None)
            raise
    try:
        yield world
    finally:
        with django_db_blocker.unblock():
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)


@contextmanager
def module_media(tmp_path_factory):
    """One media folder (and upload folder) for a module whose world outlives a test."""
    media = tmp_path_factory.mktemp("media")
    with override_settings(MEDIA_ROOT=media, FACTORY_UPLOAD_TEMP_DIR=str(media / ".uploads")):
        yield


@pytest.fixture
def flow(db):
    """A project with a manager, two agents, a reviewer and a verifier."""
    return Flow(ProjectFactory(slug="FM"))


@pytest.fixture
def other_flow(db):
    """A second project with its own members."""
    return Flow(ProjectFactory(slug="OT"))


@pytest.fixture
def api(db):
    """``api(user)``: an API client authenticated with a real bearer token of ``user``."""
    from knox.models import AuthToken
    from rest_framework.test import APIClient

    def make(user=None):
        client = APIClient()
        if user is not None:
            _, token = AuthToken.objects.create(user=user)
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        return client

    return make


@pytest.fixture(autouse=True)
def _isolated_uploads(settings, tmp_path):
    settings.FACTORY_UPLOAD_TEMP_DIR = str(tmp_path / "uploads")


class Server:
    """The site's ASGI app under uvicorn, in a thread of this process (same database)."""

    def __init__(self):
        from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

        from factory_site.asgi import django_application

        # Static files as the live server serves them: the browser tests need htmx.
        app = ASGIStaticFilesHandler(django_application)
        config = uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="off", log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    def stop(self):
        self.server.should_exit = self.server.force_exit = True  # streams stay open
        self.thread.join(10)


@pytest.fixture
def asgi_server(settings, transactional_db):
    """The site served through ASGI (the live stream needs it), on a free port."""
    settings.FACTORY_STREAM_HEARTBEAT = 0.3
    server = Server()
    yield server
    server.stop()


class Logged(logging.Handler):
    """The records the site's loggers wrote, with their request ids as the site's handler
    (its ``RequestIdFilter``) writes them."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.addFilter(RequestIdFilter())
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)

    def lines(self, *loggers: str) -> list[tuple]:
        """``(logger, request id, message)`` of each record of these loggers, in order."""
        return [(r.name, r.request_id, r.getMessage()) for r in self.records if r.name in loggers]


@pytest.fixture
def logged():
    """A ``Logged`` listening on the root logger for the test (at INFO)."""
    if "evidence.jobs.gate_run_job" not in celery_app.tasks:
        # The first job a process sends imports every app's jobs (projects.queue), and
        # Celery's Django fix-up then sets logging up anew, which would drop this handler.
        celery_app.loader.import_default_modules()
    root, handler = logging.getLogger(), Logged()
    level = root.level
    root.setLevel(logging.INFO)
    root.addHandler(handler)
    yield handler
    root.removeHandler(handler)
    root.setLevel(level)
