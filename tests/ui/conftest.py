"""Browser tests: Debian's Chromium driven by Playwright against a live server.

`playwright install` cannot download browsers here, so the tests launch the system
Chromium (``apt-get install chromium``); without it they are skipped with that hint.
"""

import os
import shutil
from pathlib import Path

import pytest
from playwright.sync_api import Keyboard, Locator, Page

from tests.ui.a11y import PageChecker
from tests.ui.routes import NOT_PAGES, PAGES

# Playwright's sync API runs an event loop in this thread; the tests' own database
# calls are ordinary synchronous ones.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="needs Debian's chromium: apt-get install chromium"
)


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {
        **browser_type_launch_args,
        "executable_path": CHROMIUM,
        # The network reaches only the package registries: keep Chromium from calling home.
        "args": [
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ],
    }


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args):
    return {**browser_context_args, "viewport": {"width": 1400, "height": 900}}


# The page checkers of the running test: each checks its page's last load before the test
# acts again. The actions are wrapped once for the session (tests/ui/a11y.py, PageChecker).
CHECKERS: list[PageChecker] = []
ACTIONS = {
    Page: (
        "goto",
        "go_back",
        "go_forward",
        "reload",
        "click",
        "dblclick",
        "fill",
        "press",
        "type",
        "check",
        "uncheck",
        "select_option",
        "set_input_files",
        "focus",
        "hover",
        "set_content",
        "close",
    ),
    Locator: (
        "click",
        "dblclick",
        "fill",
        "press",
        "type",
        "press_sequentially",
        "check",
        "uncheck",
        "select_option",
        "set_input_files",
        "focus",
        "hover",
        "set_checked",
    ),
    Keyboard: ("press", "type", "down", "insert_text"),
}


def _checked_first(action):
    def act(self, *args, **kwargs):
        for checker in list(CHECKERS):
            checker.check()
        return action(self, *args, **kwargs)

    return act


@pytest.fixture(scope="session", autouse=True)
def _check_before_acting():
    originals = [
        (kind, name, getattr(kind, name)) for kind, names in ACTIONS.items() for name in names
    ]
    for kind, name, action in originals:
        setattr(kind, name, _checked_first(action))
    yield
    for kind, name, action in originals:
        setattr(kind, name, action)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call" and report.failed:
        item.failed_call = True
    return report


@pytest.fixture
def page(page, request):
    """pytest-playwright's page, every load of which is checked: axe-core's WCAG 2.0/2.1 A and
    AA rules and 2.2's target size, and nothing past the right edge at 360, 768 and 1,400
    pixels (tests/ui/a11y.py). A test that tests/ui/routes.py names for a page must check it."""
    checker = PageChecker(page, skip=frozenset(NOT_PAGES))
    CHECKERS.append(checker)
    try:
        yield page
        checker.check()  # the page the test ended on
    finally:
        CHECKERS.remove(checker)
    if getattr(request.node, "failed_call", False):
        return  # the test's own failure says more than the pages it did not reach
    owed = {route for route, tests in PAGES.items() if request.node.originalname in tests}
    missing = sorted(owed - set(checker.checked))
    assert missing == [], f"tests/ui/routes.py names this test for {missing}: never checked"


@pytest.fixture
def shoot():
    """Save a full-page screenshot as a test artifact: test-artifacts/screenshots/<name>.png."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    def save(page, name):
        page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)

    return save


@pytest.fixture
def login(live_server):
    def log_in(page, user, password="pw"):
        page.goto(f"{live_server.url}/login/")
        page.fill("#id_username", user.username)
        page.fill("#id_password", password)
        page.click("button[type=submit]")

    return log_in
