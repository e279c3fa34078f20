"""What the landing benches share: a real origin repository whose suite runs in the
runner's sandbox, projects on it, approved changes queued through the real services while
the bench holds the lander lock, and approval-to-landed read from the events.

Used by bench/landing.py and bench/code_host_landing.py (a bench named ``landing``
cannot be imported by that name: the ``landing`` app comes first on the path).
"""

import math
import os
import shutil
import statistics
import time
from pathlib import Path

import common  # noqa: F401  (the project on sys.path, a SECRET_KEY)
from verify import git

SUITE_TEST = """\
import time
import unittest


class SuiteTest(unittest.TestCase):
    def test_suite(self):
        time.sleep({seconds})
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


class Origin:
    """A bare repository: ``main`` (the suite) and one branch per change, all pushed:
    ``names`` are independent changes (``feature``), ``extra`` maps more branch names to
    their files."""

    def __init__(
        self, folder: Path, *, suite_seconds: float, names: list[str], extra: dict | None = None
    ):
        from demo.repository import RUN_TESTS

        self.bare = folder / "origin.git"
        self.url = f"file://{self.bare}"
        work = folder / "work"
        git("init", "--quiet", "--bare", "--initial-branch=main", str(self.bare), cwd=folder)
        git("clone", "--quiet", str(self.bare), str(work), cwd=folder)
        git("checkout", "--quiet", "-b", "main", cwd=work)
        self._commit(
            work,
            {
                ".gitignore": "reports/\n__pycache__/\n",
                "run_tests.py": RUN_TESTS,
                "tests/__init__.py": "",
                "tests/test_suite.py": SUITE_TEST.format(seconds=suite_seconds),
            },
            "a suite",
        )
        self.base = git("rev-parse", "HEAD", cwd=work)
        self.commits = {}
        changes = {name: feature(name) for name in names} | (extra or {})
        for name, files in changes.items():
            git("checkout", "--quiet", "-B", name, self.base, cwd=work)
            self.commits[name] = self._commit(work, files, f"add {name}")
        git("push", "--quiet", "origin", "main", *changes, cwd=work)

    @staticmethod
    def _commit(work: Path, files: dict, message: str) -> str:
        for name, text in files.items():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            (work / name).write_text(text)
        git("add", "--all", cwd=work)
        git("commit", "--quiet", "-m", message, cwd=work)
        return git("rev-parse", "HEAD", cwd=work)

    def copy(self, name: str) -> "Origin":
        """A copy of this origin (same commits) for one project: a local repository serves
        one project only."""
        other = object.__new__(Origin)
        other.bare = self.bare.with_name(f"{name}.git")
        other.url = f"file://{other.bare}"
        other.base, other.commits = self.base, self.commits
        shutil.copytree(self.bare, other.bare)
        return other

    def landed(self) -> list[str]:
        """The commits ``main`` moved through since its first, oldest first."""
        listed = git("rev-list", "--first-parent", "--reverse", f"{self.base}..main", cwd=self.bare)
        return listed.split()


def environment(work: Path) -> None:
    """Django on a temporary SQLite database under ``work``, the runner's folders there too,
    migrated. Call before importing anything of the project's apps."""
    # The sandbox's user (FACTORY_RUNNER_UID when this runs as root) must pass through to
    # its workspace and the mirror under FACTORY_RUNNER_ROOT.
    work.chmod(0o711)
    os.environ.update(
        DATABASE_URL=f"sqlite:///{work}/db.sqlite3",
        MEDIA_ROOT=f"{work}/media",
        FACTORY_RUNNER_ROOT=f"{work}/runner",
        # The bench's origins are local repositories, under its own folder (docs/runner.md).
        FACTORY_LOCAL_REPOSITORY_ROOTS=str(work),
        LOG_LEVEL="WARNING",
        # An approval's land job runs in the approving thread (and finds the lock held),
        # never in a thread beside the lander the bench times.
        FACTORY_EAGER_BACKGROUND_QUEUES="",
    )
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "factory_site.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def verify_block(suite_seconds: float) -> dict:
    return {
        "test": "python3 run_tests.py",
        "junit": "reports/junit.xml",
        "timeout_seconds": max(60, int(suite_seconds * 4)),
    }


def new_project(slug: str, url: str, verify: dict):
    """A project on the repository at ``url`` with the runner in its gate policy, and its
    members (a ``tests.factories.Flow``)."""
    from projects import services as project_services
    from tests.factories import Flow

    project = project_services.project_create(
        slug=slug,
        name=f"{slug} bench",
        repository_url=url,
        verify=verify,
        gate_policy={"runner": {}},
    )
    return Flow(project, prefix=slug.lower())


def measure_suite(origin: Origin, verify: dict) -> dict:
    """The suite on ``main`` in the sandbox, three times: the test command's seconds (what
    the limits use) and the wall time of the whole ``verify_tree`` run (checkout, sandbox,
    reports)."""
    from runner import mirror
    from runner.verify import verify_tree

    project = new_project("CAL", origin.copy("calibration").url, verify).project
    path, _ = mirror.mirror(project)
    inside, wall = [], []
    for _ in range(3):
        started = time.perf_counter()
        result = verify_tree(project=project, path=path, sha=origin.base)
        wall.append(time.perf_counter() - started)
        inside.append(result.seconds)
        if not result.passed:
            raise SystemExit(f"the suite fails on main: {result.problems}")
    return {
        "suite_seconds": round(statistics.median(inside), 3),
        "verify_run_wall_seconds": round(statistics.median(wall), 3),
        "samples_s": [round(s, 3) for s in inside],
    }


def queue_approved(flow, commits: dict, names: list[str], *, branches: bool = False) -> dict:
    """Each of ``names`` claimed, submitted at ``commits[name]`` (with its branch, the
    change's name, when ``branches``), then approved, in this order, while the bench holds
    the project's lander lock: the approvals' land jobs run in this thread and find it
    held, so nothing lands until the bench calls the lander. Submissions go straight to
    review (no gates): the lander's own verification is what counts. ``{name: task}``."""
    from landing.locks import lander_lock
    from tasks import attempts, review
    from tasks.models import Attempt, Task
    from tests.factories import all_met

    tasks = {}
    with lander_lock(flow.project.pk) as held:
        assert held, "the bench could not take its own project's lander lock"
        flow.gates({})
        for name in names:
            task, attempt = flow.claimed(title=f"Add {name}")
            change = {"commit": commits[name]} | ({"branch": name} if branches else {})
            attempts.attempt_submit(
                attempt=attempt, actor=attempt.agent, summary="done", change=change
            )
            attempt.refresh_from_db()
            if attempt.state == "checking":
                attempts.attempt_gates_passed(attempt=attempt)
            tasks[name] = task
        flow.gates({"runner": {}})
        for name in names:
            task = Task.objects.get(pk=tasks[name].pk)
            attempt = Attempt.objects.get(pk=task.current_attempt_id)
            review.task_approve(task=task, actor=flow.reviewer, criteria=all_met(attempt))
    return tasks


def approval_to_done(tasks) -> list[float]:
    """Seconds from each task's approval to its becoming done, read from its events (the
    first that moved it to ``approved`` and to ``done``), sorted; tasks not done are left
    out."""
    from projects.models import Event

    waits = []
    for task in tasks:
        events = Event.objects.filter(task=task).order_by("created_at", "pk")
        approved = events.filter(to_state="approved").first()
        done = events.filter(to_state="done").first()
        if approved is not None and done is not None:
            waits.append((done.created_at - approved.created_at).total_seconds())
    return sorted(waits)


def p50_p95(samples: list[float], digits: int = 2) -> dict:
    """The median and the 95th percentile (nearest rank) of ``samples``."""
    if not samples:
        return {"p50": None, "p95": None}
    ordered = sorted(samples)
    return {
        "p50": round(statistics.median(ordered), digits),
        "p95": round(ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)], digits),
    }
