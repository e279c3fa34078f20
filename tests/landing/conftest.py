"""Fixtures for the merge queue's tests: a real origin repository and queued changes.

``origin`` is a bare repository (the project's repository, which the lander pushes to)
and a work clone where agents and people make their commits. Its suite is the runner
demo's ``run_tests.py`` over ``tests/``: standard library only, so the sandbox needs
nothing but the system's Python.
"""

import re
import shutil
import subprocess
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.db import connections

from demo.repository import RUN_TESTS
from landing import backoff
from landing.locks import lander_lock
from landing.models import Batch, BatchState, Lander
from projects import services as project_services
from projects.models import Event, Project
from runner.verify import Result
from tasks import attempts, review
from tasks.models import Attempt, Task
from tests.conftest import open_to_the_sandbox
from tests.factories import all_met
from tests.runner.conftest import GIT_ENV, SANDBOX_UID

VERIFY = {"test": "python3 run_tests.py", "junit": "reports/junit.xml", "timeout_seconds": 60}

CALC = """\
def add(a, b):
    return a + b


def double(a):
    return add(a, a)
"""

CALC_TESTS = """\
import unittest

from calc import add, double


class CalcTest(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)

    def test_double(self):
        self.assertEqual(double(4), 8)
"""


def feature(name: str) -> dict:
    """An independent change: a module of its own and its test."""
    return {
        f"{name}.py": f"def {name}():\n    return {name!r}\n",
        f"tests/test_{name}.py": (
            f"import unittest\n\nfrom {name} import {name}\n\n\n"
            f"class {name.title()}Test(unittest.TestCase):\n"
            f"    def test_{name}(self):\n        self.assertEqual({name}(), {name!r})\n"
        ),
    }


def broken(name: str) -> dict:
    """A change whose own test fails wherever it lands."""
    files = feature(name)
    files[f"tests/test_{name}.py"] = files[f"tests/test_{name}.py"].replace(
        f"{name}(), {name!r}", f"{name}(), 'not {name}'"
    )
    return files


class Origin:
    """A bare repository on ``main`` and a clone to commit in."""

    def __init__(self, folder: Path):
        self.bare = folder / "origin.git"
        self.work = folder / "work"
        self.url = f"file://{self.bare}"
        self._git(folder, "init", "-q", "--bare", "-b", "main", str(self.bare))
        # The origin keeps a record of every move of its branches: the tests read it back.
        self._git(self.bare, "config", "core.logAllRefUpdates", "always")
        self._git(folder, "clone", "-q", str(self.bare), str(self.work))
        self.write(
            {
                "run_tests.py": RUN_TESTS,
                "calc.py": CALC,
                "tests/__init__.py": "",
                "tests/test_calc.py": CALC_TESTS,
            }
        )
        self.git("checkout", "-q", "-b", "main")
        self.git("add", "-A")
        self.git("commit", "-q", "-m", "base")
        self.git("push", "-q", "origin", "main")
        self.base = self.tip()

    @staticmethod
    def _git(cwd: Path, *args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=cwd, env=GIT_ENV, capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    def git(self, *args: str) -> str:
        return self._git(self.work, *args)

    def write(self, files: dict) -> None:
        for name, text in files.items():
            path = self.work / name
            if text is None:
                path.unlink()
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)

    def change(self, branch: str, files: dict, *, on: str | None = None) -> str:
        """Commit ``files`` on ``branch`` from ``on`` (main as the origin has it) and push it."""
        self.git("fetch", "-q", "origin")
        self.git("checkout", "-q", "-B", branch, on or "origin/main")
        self.write(files)
        self.git("add", "-A")
        self.git("commit", "-q", "-m", f"work on {branch}")
        self.git("push", "-q", "-f", "origin", branch)
        return self.git("rev-parse", "HEAD")

    def person_pushes(self, files: dict) -> str:
        """Someone commits straight to main, as people do."""
        self.git("fetch", "-q", "origin")
        self.git("checkout", "-q", "-B", "main", "origin/main")
        self.write(files)
        self.git("add", "-A")
        self.git("commit", "-q", "-m", "a person's commit")
        self.git("push", "-q", "origin", "main")
        return self.tip()

    def tip(self, branch: str = "main") -> str:
        return self._git(self.bare, "rev-parse", branch)

    def first_parents(self, since: str) -> list[str]:
        """The commits main moved through after ``since``, oldest first."""
        listed = self._git(self.bare, "rev-list", "--first-parent", "--reverse", f"{since}..main")
        return listed.split()

    def message(self, commit: str) -> str:
        return self._git(self.bare, "log", "-1", "--format=%B", commit)

    def files(self, commit: str) -> list[str]:
        return self._git(self.bare, "ls-tree", "-r", "--name-only", commit).split()

    def reflog_moves(self) -> list[tuple[str, str]]:
        """Every move of main (old, new) the origin recorded after its creation, oldest first."""
        log = self.bare / "logs" / "refs" / "heads" / "main"
        moves = [tuple(line.split()[:2]) for line in log.read_text().splitlines()]
        return [(old, new) for old, new in moves if set(old) != {"0"}]


@pytest.fixture
def origin(tmp_path, settings) -> Origin:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed on this machine")
    open_to_the_sandbox(tmp_path)
    settings.FACTORY_RUNNER_UID = SANDBOX_UID
    return Origin(tmp_path)


@pytest.fixture
def queue(flow, origin):
    """``queue.approved(files, branch=…)``: a task whose approved change is ``files``,
    queued to land; ``queue.on(batch_max=…, method=…)`` turns landing on."""

    class Queue:
        def __init__(self):
            flow.gates({})  # straight to review: the lander's own verification is what counts
            project_services.project_update(
                project=flow.project,
                actor=flow.manager,
                repository_url=origin.url,
                verify=VERIFY,
            )
            self.on()

        def on(self, **landing):
            flow.project.refresh_from_db()
            flow.project.gate_policy = {"runner": {}}
            flow.project.save(update_fields=["gate_policy"])
            project_services.project_update(
                project=flow.project,
                actor=flow.manager,
                landing={"mode": "push", "method": "squash", "batch_max": 4, **landing},
            )
            flow.project.refresh_from_db()
            return flow.project

        def in_review(
            self,
            files: dict,
            *,
            branch: str,
            title: str = "",
            on: str | None = None,
            commit: str = "",
        ):
            commit = commit or origin.change(branch, files, on=on)
            policy = flow.project.gate_policy
            flow.gates({})
            task, attempt = flow.claimed(title=title or f"Add {branch}")
            attempts.attempt_submit(
                attempt=attempt, actor=attempt.agent, summary="done", change={"commit": commit}
            )
            attempt.refresh_from_db()
            if attempt.state == "checking":
                attempt = attempts.attempt_gates_passed(attempt=attempt)
            flow.gates(policy)
            task.refresh_from_db()
            attempt.refresh_from_db()
            return task, attempt

        def approve(self, task, attempt):
            review.task_approve(task=task, actor=flow.reviewer, criteria=all_met(attempt))
            task.refresh_from_db()
            attempt.refresh_from_db()
            return task, attempt

        def approved(self, files: dict, *, branch: str, title: str = ""):
            return self.approve(*self.in_review(files, branch=branch, title=title))

    return Queue()


# --- Queued changes without a repository (the faces' tests) ---------------------------------

LANDING = {"mode": "push", "method": "squash", "batch_max": 4, "target_branch": ""}


@pytest.fixture
def lands(flow):
    """``flow`` with landing on (set directly: no repository is pushed to in these tests)."""
    Project.objects.filter(pk=flow.project.pk).update(landing=LANDING)
    flow.project.refresh_from_db()
    flow.gates({})
    return flow


def queued(flow, title="A change"):
    """A task approved with landing on: queued, its approved commit ``abc1230000000000000000000000000000000000``."""
    task, attempt = flow.done(title=title)
    task.refresh_from_db()
    attempt.refresh_from_db()
    assert (task.state, attempt.landing["state"]) == ("approved", "queued")
    return task, attempt


def snapshot(task):
    task = Task.objects.get(pk=task.pk)
    attempt = Attempt.objects.filter(task=task).order_by("-pk").first()
    return (
        task.state,
        task.current_attempt_id,
        attempt.state,
        attempt.landing,
        attempt.queued_at,
        Event.objects.count(),
    )


@contextmanager
def lander_at_work(project_id: int):
    """A lander elsewhere holding the project's lock (a thread, with its own connection)."""
    holding, done = threading.Event(), threading.Event()

    def hold():
        try:
            with lander_lock(project_id) as held:
                assert held
                holding.set()
                done.wait(60)
        finally:
            connections.close_all()

    thread = threading.Thread(target=hold)
    thread.start()
    assert holding.wait(30), "the other lander never took the lock"
    try:
        yield
    finally:
        done.set()
        thread.join()


def backing_off(flow, attempt):
    """The project's lander backs off after a batch that verified and erred."""
    batch = Batch.objects.create(
        project=flow.project,
        state=BatchState.ERROR,
        target="main",
        method="squash",
        base="a" * 40,
        verify_runs=2,
        reason="nothing landed: the target itself fails its tests",
    )
    return backoff.record(
        flow.project,
        head=attempt,
        tip="a" * 40,
        reason=batch.reason,
        verified=True,
        batch=batch,
    )


def lander_snapshot(project):
    lander = Lander.objects.filter(project=project).first()
    state = (lander.state, lander.reason, lander.wake_at) if lander else None
    return state, Event.objects.count()


# --- The runner, scripted ---------------------------------------------------------------------


class Script:
    """The runner, scripted: each tree's tests are read from git; ``fails[test](n)`` says
    whether ``test`` fails at its ``n``-th run (1 first), counted over every tree. A
    test that no rule names passes, unless its file says ``'not <name>'`` (``broken``)."""

    def __init__(self, origin):
        self.origin = origin
        self.fails: dict = {}
        self.runs: dict = {}
        self.calls = 0

    def __call__(self, *, project, path, sha):
        self.calls += 1
        failed, cases = False, []
        for name in self.origin._git(path, "ls-tree", "-r", "--name-only", sha).split():
            if not (name.startswith("tests/test_") and name.endswith(".py")):
                continue
            text = self.origin._git(path, "show", f"{sha}:{name}")
            (klass,) = re.findall(r"^class (\w+)\(", text, re.MULTILINE)
            for method in re.findall(r"def (test_\w+)\(", text):
                test = f"{name}::{klass}::{method}"
                self.runs[test] = self.runs.get(test, 0) + 1
                rule = self.fails.get(test)
                fails = rule(self.runs[test]) if rule else "'not " in text
                failed |= fails
                classname = f"{name[: -len('.py')].replace('/', '.')}.{klass}"
                failure = '<failure message="boom">boom</failure>' if fails else ""
                cases.append(
                    f'<testcase classname="{classname}" name="{method}">{failure}</testcase>'
                )
        junit = f"<testsuite>{''.join(cases)}</testsuite>".encode()
        result = Result(commit=sha, base="", mirror="built", junit=junit)
        result.steps = [{"name": "test", "exit_code": 1 if failed else 0, "stopped": None}]
        if failed:
            result.problems.append("the test command exited with code 1")
        return result


@pytest.fixture
def script(origin, monkeypatch):
    """The lander verifies with a ``Script`` instead of the sandbox."""
    script = Script(origin)
    monkeypatch.setattr("landing.verifying.verify_tree", script)
    return script
