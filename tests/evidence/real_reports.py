"""Real reports for the evidence tests, made by running real suites with pytest under
coverage.py. Each kind is made once per test session and shared by every module and every
pytest-xdist worker that asks for it (tests/evidence/conftest.py): a pytest run in a
subprocess costs seconds, and the reports are bytes that no test may change."""

import fcntl
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from xml.etree import ElementTree

import pytest


def pytest_for(work: Path) -> list[str]:
    """``python -m pytest`` rooted in ``work``: no configuration file, and no conftest.py
    above ``work`` (never this repository's), whatever folder ``work`` is made in."""
    plain = ["-m", "pytest", "-p", "no:django", "-p", "no:cacheprovider", "-c", os.devnull]
    return [*plain, "--rootdir", str(work), "--confcutdir", str(work)]


def python(*args, cwd):
    """Run this interpreter outside Django's settings, as a developer's shell would."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = str(cwd)
    # The suites need no plugin; this environment's (hypothesis, faker, playwright, …) take
    # seconds to import in every run.
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, timeout=120
    )


def made_once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], object]):
    """``make(folder)`` once per test run, whichever pytest-xdist worker asks first.

    The workers of one run share the parent of their base temporary folders: the first to
    take the lock makes the reports and leaves them there; the others wait for it and read
    them. Without xdist the parent is not shared, so the run makes them itself.
    """
    base = tmp_path_factory.getbasetemp()
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return make(tmp_path_factory.mktemp(name))
    shared = base.parent / f"shared-{name}"
    with open(base.parent / f"shared-{name}.lock", "wb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if shared.exists():
            return pickle.loads(shared.read_bytes())
        made = make(tmp_path_factory.mktemp(name))
        shared.write_bytes(pickle.dumps(made))
        return made


# --- The claim queue's suite, run green, red and empty --------------------------------------

CLAIMQUEUE = """\
def claim(queue, agent):
    for item in queue:
        if item["holder"] is None:
            item["holder"] = agent
            return item
    return None


def release(item):
    if item["holder"] is None:
        raise ValueError("not claimed")
    item["holder"] = None
"""
TEST_CLAIM = """\
from claimqueue import claim


def test_a_claim_takes_the_first_free_item():
    queue = [{"holder": "a"}, {"holder": None}]
    assert claim(queue, "b") is queue[1]


def test_two_agents_never_get_the_same_item():
    queue = [{"holder": None}]
    first, second = claim(queue, "a"), claim(queue, "b")
    assert (first["holder"], second) == ("a", None)
"""
TEST_QUEUE = """\
from claimqueue import claim


def test_an_empty_queue_gives_nothing():
    assert claim([], "a") is None
"""


def _suite(work: Path, test_claim: str) -> Path:
    (work / "tests").mkdir(parents=True)
    (work / "claimqueue.py").write_text(CLAIMQUEUE)
    (work / "tests" / "test_claim.py").write_text(test_claim)
    (work / "tests" / "test_queue.py").write_text(TEST_QUEUE)
    return work


def pytest_in(work: Path, junit: Path, *args) -> list[str]:
    """``python -m pytest`` of a suite's tests/ directory, writing a JUnit report."""
    return [*pytest_for(work), "--junitxml", str(junit), *args, "tests"]


def run_suites(root: Path) -> dict:
    """Run the suite with pytest under coverage.py, then with one test broken, then selecting
    no test at all; return the JUnit and Cobertura reports exactly as the tools wrote them."""
    passing = _suite(root / "passing", TEST_CLAIM)
    failing = _suite(root / "failing", TEST_CLAIM.replace('("a", None)', '("b", None)'))
    data = f"--data-file={passing / '.coverage'}"
    measure = ["-m", "coverage", "run", data, "--include=claimqueue.py"]

    green = python(*measure, *pytest_in(passing, passing / "junit.xml"), cwd=passing)
    red = python(*pytest_in(failing, failing / "junit.xml"), cwd=failing)
    none = python(*pytest_in(passing, root / "empty.xml", "-k", "no_such_test"), cwd=passing)
    xml = python("-m", "coverage", "xml", data, "-o", str(passing / "coverage.xml"), cwd=passing)

    codes = (green.returncode, red.returncode, none.returncode, xml.returncode)
    assert codes == (0, 1, 5, 0), (green.stdout, red.stdout)
    junit_failing = (failing / "junit.xml").read_bytes()
    coverage = (passing / "coverage.xml").read_bytes()
    failure = ElementTree.fromstring(junit_failing).find(".//failure")
    return {
        "passing": (passing / "junit.xml").read_bytes(),
        "failing": junit_failing,
        "failure_message": failure.get("message").strip(),
        "empty": (root / "empty.xml").read_bytes(),
        "coverage": coverage,
        "line_rate": float(ElementTree.fromstring(coverage).get("line-rate")),
    }


# --- A tiny suite: one pass, one failure, one skip ------------------------------------------

CALC = """\
def add(a, b):
    return a + b


def sign(x):
    if x < 0:
        return -1
    return 1
"""
TINY_SUITE = """\
import pytest
from calc import add


def test_adds():
    assert add(1, 2) == 3


def test_adds_wrongly():
    assert add(2, 2) == 5


@pytest.mark.skip(reason="not today")
def test_skipped():
    pass
"""


def run_tiny_suite(work: Path) -> dict:
    """One pytest run of the tiny suite under coverage.py: its JUnit, Cobertura and log."""
    (work / "calc.py").write_text(CALC)
    (work / "test_tiny.py").write_text(TINY_SUITE)
    data = f"--data-file={work / '.coverage'}"
    measure = ["-m", "coverage", "run", data, "--include=calc.py"]
    junit = ["--junitxml", str(work / "junit.xml")]

    tests = python(*measure, *pytest_for(work), *junit, "test_tiny.py", cwd=work)
    report = python("-m", "coverage", "xml", data, "-o", str(work / "coverage.xml"), cwd=work)

    assert (tests.returncode, report.returncode) == (1, 0), tests.stderr
    return {
        "junit": (work / "junit.xml").read_bytes(),
        "coverage": (work / "coverage.xml").read_bytes(),
        "log": tests.stdout,
    }
