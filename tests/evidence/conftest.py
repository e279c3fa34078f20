"""The real reports the evidence tests read, each made once per test session (and shared by
pytest-xdist's workers): they are bytes, so every test still attaches and parses its own."""

import pytest

from demo.artifacts import run_suite
from tests.evidence.real_reports import made_once, run_suites, run_tiny_suite


@pytest.fixture(scope="session")
def reports(tmp_path_factory):
    """The claim queue's suite run green under coverage.py, red, and selecting no test."""
    return made_once(tmp_path_factory, "claim-suite", run_suites)


@pytest.fixture(scope="session")
def suite(tmp_path_factory):
    """A real pytest run under coverage.py of a tiny suite: one pass, one failure, one skip."""
    return made_once(tmp_path_factory, "tiny-suite", run_tiny_suite)


# Named apart from its function: a conftest function called pytest_* is taken for a hook.
@pytest.fixture(scope="session", name="pytest_run")
def demo_suite_run(tmp_path_factory):
    """A real pytest run of the demo suite, with colours, one test failing."""
    return made_once(tmp_path_factory, "demo-suite", lambda _: run_suite(broken=True))
