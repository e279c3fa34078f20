"""The runner demo's repository: a small, real git repository the runner can verify.

``build(path)`` creates it with five commits: ``main`` (a claim queue with passing
tests), ``honest`` (a change whose tests pass), ``false-claim`` (a change that breaks a
test, which the agent will claim passes), and for the merge queue ``rename`` and
``fairness``, which each pass alone and fail together. Its tests run on the standard
library only (``python3 run_tests.py`` writes a JUnit report), so the sandbox needs
nothing but the system's Python.
"""

import subprocess
from dataclasses import dataclass
from pathlib import Path

VERIFY = {"test": "python3 run_tests.py", "junit": "reports/junit.xml", "timeout_seconds": 60}
# The test the false claim breaks, as tests-pass and the runner name it.
FAILING_TEST = "tests/test_claimqueue.py::ClaimTest::test_claim_skips_tasks_with_open_dependencies"

RUN_TESTS = '''\
"""Run tests/ with unittest and write reports/junit.xml (standard library only)."""

import os
import sys
import time
import unittest
import xml.etree.ElementTree as ET


class Recorder(unittest.TextTestResult):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cases = []

    def startTest(self, test):
        self.started = time.monotonic()
        super().startTest(test)

    def _record(self, test, outcome, text=""):
        self.cases.append((test.id(), outcome, text, time.monotonic() - self.started))

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._record(test, "failure", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self._record(test, "error", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._record(test, "skipped", reason)


result = unittest.TextTestRunner(resultclass=Recorder, verbosity=2).run(
    unittest.defaultTestLoader.discover("tests", top_level_dir=".")
)
suite = ET.Element("testsuite", name="unittest", tests=str(len(result.cases)))
for test_id, outcome, text, seconds in result.cases:
    classname, name = test_id.rsplit(".", 1)
    case = ET.SubElement(suite, "testcase", classname=classname, name=name, time=f"{seconds:.3f}")
    if outcome != "passed":
        lines = text.strip().splitlines() or [""]
        said = [line for line in lines if line[:1].isalpha() and ("Error" in line or "Exception" in line)]
        ET.SubElement(case, outcome, message=(said or lines)[-1]).text = text
os.makedirs("reports", exist_ok=True)
ET.ElementTree(suite).write("reports/junit.xml", encoding="utf-8", xml_declaration=True)
sys.exit(0 if result.wasSuccessful() else 1)
'''

CLAIMQUEUE = '''\
"""A tiny claim queue."""


def claim(tasks, done):
    """The best ready task whose dependencies are all done, now claimed; or None."""
    ready = [t for t in tasks if t["state"] == "ready"]
    ready = [t for t in ready if all(dep in done for dep in t.get("depends_on", ()))]
    ready.sort(key=lambda t: (-t["priority"], t["created"]))
    if not ready:
        return None
    ready[0]["state"] = "claimed"
    return ready[0]
'''

TESTS = """\
import unittest

from claimqueue import claim


def make(key, priority=0, created=0, depends_on=()):
    return {"key": key, "state": "ready", "priority": priority, "created": created,
            "depends_on": list(depends_on)}


class ClaimTest(unittest.TestCase):
    def test_claim_takes_highest_priority_first(self):
        tasks = [make("RD-1"), make("RD-2", priority=5)]
        self.assertEqual(claim(tasks, done=set())["key"], "RD-2")

    def test_claim_skips_tasks_with_open_dependencies(self):
        tasks = [make("RD-2", priority=9, depends_on=["RD-1"]), make("RD-3")]
        self.assertEqual(claim(tasks, done=set())["key"], "RD-3")
"""

RELEASE = '''

def release(task):
    """Put a claimed task back; anything else is refused."""
    if task["state"] != "claimed":
        raise ValueError(f"{task['key']} is {task['state']}, not claimed")
    task["state"] = "ready"
    return task
'''

RELEASE_TESTS = """

class ReleaseTest(unittest.TestCase):
    def test_release_puts_a_claimed_task_back(self):
        from claimqueue import release

        task = claim([make("RD-1")], done=set())
        self.assertEqual(release(task)["state"], "ready")
"""

# The false claim: "dependencies are respected" while the filter is gone.
BROKEN = CLAIMQUEUE.replace(
    '    ready = [t for t in ready if all(dep in done for dep in t.get("depends_on", ()))]\n', ""
)


# The landing demo's pair: each passes alone; together the new test calls the old name.
RENAMED = CLAIMQUEUE.replace("def claim(", "def claim_next(")
RENAMED_TESTS = TESTS.replace("import claim", "import claim_next").replace(
    "claim(tasks", "claim_next(tasks"
)
FAIRNESS_TESTS = """\
import unittest

import claimqueue


class FairnessTest(unittest.TestCase):
    def test_equal_priorities_go_oldest_first(self):
        tasks = [
            {"key": "RD-9", "state": "ready", "priority": 1, "created": 2},
            {"key": "RD-8", "state": "ready", "priority": 1, "created": 1},
        ]
        self.assertEqual(claimqueue.claim(tasks, done=set())["key"], "RD-8")
"""


@dataclass(frozen=True)
class DemoRepository:
    path: Path
    main: str
    honest: str
    false_claim: str
    rename: str  # lands: the claim gets a clearer name
    fairness: str  # comes back: its new test calls the old name

    @property
    def url(self) -> str:
        return f"file://{self.path}"


def _git(path: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=Factory Demo", "-c", "user.email=demo@example.invalid", *args],
        cwd=path,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def _commit(path: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    _git(path, "add", "-A")
    _git(path, "commit", "-q", "-m", message)
    return _git(path, "rev-parse", "HEAD")


def build(path: Path) -> DemoRepository:
    """Create the demo repository at ``path`` (which must not exist yet)."""
    path.mkdir(parents=True)
    _git(path, "init", "-q", "-b", "main")
    main = _commit(
        path,
        {
            "run_tests.py": RUN_TESTS,
            "claimqueue.py": CLAIMQUEUE,
            "tests/__init__.py": "",
            "tests/test_claimqueue.py": TESTS,
            ".gitignore": "reports/\n__pycache__/\n",
        },
        "A claim queue with its tests",
    )
    _git(path, "checkout", "-q", "-b", "honest")
    honest = _commit(
        path,
        {"claimqueue.py": CLAIMQUEUE + RELEASE, "tests/test_claimqueue.py": TESTS + RELEASE_TESTS},
        "Release puts a claimed task back",
    )
    _git(path, "checkout", "-q", "-b", "false-claim", "main")
    false_claim = _commit(path, {"claimqueue.py": BROKEN}, "Simplify the claim filter")
    _git(path, "checkout", "-q", "-b", "rename", "main")
    rename = _commit(
        path,
        {"claimqueue.py": RENAMED, "tests/test_claimqueue.py": RENAMED_TESTS},
        "Name the claim for what it does",
    )
    _git(path, "checkout", "-q", "-b", "fairness", "main")
    fairness = _commit(
        path, {"tests/test_fairness.py": FAIRNESS_TESTS}, "Test that equal claims go oldest first"
    )
    # No branch checked out: the merge queue pushes to main here, as to a code host.
    _git(path, "checkout", "-q", "--detach", "main")
    return DemoRepository(path, main, honest, false_claim, rename, fairness)
