"""The landing proof: agents change a real repository and the merge queue lands their work.

A bare origin (in the run's temporary folder, reached over ``file://``) starts with a
small standard-library suite (the runner demo's ``run_tests.py``). The project's runner
verifies every submission at its commit, a reviewer approves everything, and landing is
on (``push``, ``batch_max`` 4), so every approved change goes through the lander, which
runs in real Celery workers on its own queue ``land`` (the runner's jobs on ``verify``).
The plan (``plan``) puts in:

- textual conflicts: a fifth of the tasks add a line to ``registry.py``, in groups
  claimed together (so made on the same ``main``), each group at the same place (the end
  of its own list in the file): a group's changes clash with each other, not with other
  groups' (one place for all of them makes every retry clash with every other: below);
- semantic conflicts: pairs claimed together, one renaming ``old_k`` to ``new_k``
  everywhere, the other adding a test that calls the function by the name it sees; each
  passes alone, together they fail. The first pair's test fails with a control character
  in its message, so that merged tree's JUnit report is not well-formed: the lander must
  send the culprit back naming the unreadable report, and the queue move on;
- independent features (a module and its test each).

Meanwhile the runner and lander workers are SIGKILLed while a batch is being landed, a
person pushes straight to ``main`` while a batch is being verified (so the lander's lease
on the target is refused and it builds again), and a person breaks ``main`` (a failing
test) while a batch is being built or verified and mends it ``red_seconds`` later: the
lander must verify at most once per tip and queue head and back off, while the runner
goes on verifying submissions. Agents (``proof.coder``) redo a change that
came back on the new ``main``. At the end the invariants are checked with SQL and git
(``landing_invariants``), besides the generic ones (``proof.invariants``).
"""

import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path

import httpx
import psycopg

from demo.repository import RUN_TESTS
from proof import carry
from proof.coder import GIT_ENV, edit, git
from proof.invariants import check_all
from proof.stack import REDIS_DB, ROOT, Stack
from proof.workers import celery_worker
from runner.sandbox import Bubblewrap

ACTIVE = ("building", "verifying", "pushing")
REGISTRY_TEST = """\
import unittest

import registry


class RegistryTest(unittest.TestCase):
    def test_base_first_and_no_entry_twice(self):
        for name in dir(registry):
            if name.startswith("SECTION_"):
                entries = getattr(registry, name)
                self.assertEqual(entries[0], "base")
                self.assertEqual(len(entries), len(set(entries)))
"""


# Two tests of the base that fail a share of their runs whatever the tree (``flaky_percent``):
# the coin is the test's, not the code's, so the check of landed commits excuses them (``recheck``).
FLAKY = ("a", "b")
FLAKY_TEST = """\
import random
import unittest


class Flaky{name}Test(unittest.TestCase):
    def test_coin(self):
        self.assertGreaterEqual(random.random(), {share})
"""


def flaky_ids() -> set[str]:
    return {f"tests/test_flaky_{name}.py::Flaky{name.upper()}Test::test_coin" for name in FLAKY}


RED_TEST = """\
import unittest


class RedTest(unittest.TestCase):
    def test_main_is_green(self):
        self.fail("a person broke main")
"""


def registry(sections: int) -> str:
    """The shared file: one list per group of shared tasks; a group adds to its own list."""
    return "\n".join(f'SECTION_{g} = [\n    "base",\n]\n' for g in range(sections))


@dataclass
class LandingRun:
    agents: int
    tasks: int
    pairs: int  # semantic conflicts planned: rename + caller, claimed together
    group: int  # shared-file tasks claimed together
    kills: int  # times the runner and lander workers are SIGKILLed while a batch is active
    pushes: int  # times a person pushes to main while a batch is verifying
    red_seconds: float = 0  # how long a person's failing test stays on main (0: never)
    flaky_percent: float = 0  # two tests of the base fail this share of their runs
    pause_seconds: float = 0  # a manager pauses landing this long, a third of the way in
    fast_lane: bool = False  # a manager puts the last queued change first (during the pause)
    runners: int = 2
    landers: int = 1
    batch_max: int = 4
    # Off, the plan's clashes happen as planned (the invariants are tried on them); on,
    # claims keep overlapping work apart, and the run measures how many clashes remain.
    avoid_overlap: bool = False
    check_every: int = 1  # verify every n-th landed commit afterwards (1: all of them)
    timeout: float = 1800
    name: str = "landing"
    seed: int = 25
    faults: list = field(default_factory=list)
    manager_token: str = ""  # set by the run once the project is made

    def execute(self, *, keep: bool = False) -> dict:
        """Run it; ``faults`` then holds this execution's faults only."""
        # A list of its own: ``dataclasses.replace`` hands the same list to every copy, and
        # the checks of a later run of ``SideBySide`` read the first run's red target and
        # fast-lane request (and count its kills and pushes as their own).
        self.faults = []
        return execute(self, keep=keep)


@dataclass
class SideBySide:
    """The same plan and seed run three times in one invocation, each run's invariants
    checked: ``off`` (with its flaky tests, claims avoiding overlap off); the same without
    flaky tests (``flaky_percent`` 0, everything else equal); and ``off`` with claims
    avoiding overlap. Side by side: the clashes per 100 tasks with avoidance off and on,
    and the throughput with flakes and without, which must be within ``slower_at_most``
    (a violation otherwise: ``throughput_with_flakes_within_15_percent``)."""

    off: LandingRun
    slower_at_most: float = 0.15

    def execute(self, *, keep: bool = False) -> dict:
        name = self.off.name
        runs = [
            self.off,
            # Back to back with the run it is compared with: load on a shared machine drifts.
            replace(self.off, flaky_percent=0, name=f"{name}-noflakes"),
            replace(self.off, avoid_overlap=True, name=f"{name}-apart"),
        ]
        results = [run.execute(keep=keep) for run in runs]
        flakes, clean, apart = results
        kept = throughput_kept(
            flakes["landing"]["throughput"], clean["landing"]["throughput"], self.slower_at_most
        )
        checks = {"throughput_with_flakes_within_15_percent": kept}
        violations = sum(result["violations"] for result in results) + kept["violations"]
        return {
            "scenario": name,
            "conflicts_per_100_tasks": {
                "avoid_overlap_off": flakes["landing"]["conflicts_per_100_tasks"],
                "avoid_overlap_on": apart["landing"]["conflicts_per_100_tasks"],
            },
            "returns_per_100_tasks": {
                "avoid_overlap_off": flakes["landing"]["returns_per_100_tasks"],
                "avoid_overlap_on": apart["landing"]["returns_per_100_tasks"],
            },
            "throughput": {
                "with_flakes": flakes["landing"]["throughput"],
                "without_flakes": clean["landing"]["throughput"],
            },
            # What the "done when" names, for the run with flakes, in one place.
            "with_flakes": {
                name: flakes["invariants"][name]["violations"]
                for name in (
                    "no_change_returned_for_a_flake",
                    "landed_commits_pass",
                    "paused_and_fast_lane_kept",
                )
            },
            "checks": checks,
            "runs": results,
            "violations": violations,
            "ok": violations == 0,
        }


def throughput(landed_at: list, queued_at: list) -> dict:
    """Landed changes per minute of landing: how many landed, over the seconds from the
    first approval (an attempt's ``queued_at``) to the last ``land`` event. Measured there,
    not over the whole run, so the stack's start, the seed, the carried-approval check and
    the re-check of landed commits afterwards (none of them the queue's work) are left out;
    the pause and the red target are inside it, as in every run of the plan."""
    if not landed_at or not queued_at:
        return {"landed": len(landed_at), "seconds": None, "per_minute": None}
    first, last = min(queued_at), max(landed_at)
    seconds = (last - first).total_seconds()
    return {
        "landed": len(landed_at),
        "seconds": round(seconds, 1),
        "per_minute": round(60 * len(landed_at) / seconds, 2) if seconds > 0 else None,
        "from": first.isoformat(),
        "to": last.isoformat(),
    }


def throughput_kept(with_flakes: dict, without: dict, slower_at_most: float) -> dict:
    """One violation when the run with flakes landed more than ``slower_at_most`` slower
    (per minute of landing) than the run without, or when either landed nothing to compare."""
    have, want = with_flakes.get("per_minute"), without.get("per_minute")
    check = {"with_flakes": have, "without_flakes": want, "slower_at_most": slower_at_most}
    if not have or not want:
        return {**check, "violations": 1, "examples": ["a run landed nothing to compare"]}
    slower = 1 - have / want
    check["slower_by"] = round(slower, 3)
    if slower > slower_at_most:
        return {
            **check,
            "violations": 1,
            "examples": [
                f"{have} landed per minute with flakes, {want} without: "
                f"{100 * slower:.1f}% slower (at most {100 * slower_at_most:.0f}%)"
            ],
        }
    return {**check, "violations": 0, "examples": []}


def scenario(short: bool) -> LandingRun | SideBySide:
    """The short form (in ``make proof``) runs the plan once with overlap not avoided, so its
    clashes happen; the full form runs it three times (``SideBySide``): with flaky tests,
    without them, and with flaky tests and overlap avoided."""
    if short:
        return LandingRun(
            agents=4,
            tasks=24,
            pairs=2,
            group=3,
            kills=1,
            pushes=1,
            red_seconds=60,
            flaky_percent=5,
            pause_seconds=20,
            fast_lane=True,
            timeout=900,
        )
    return SideBySide(
        LandingRun(
            agents=16,
            tasks=200,
            pairs=6,
            group=4,
            kills=3,
            pushes=3,
            red_seconds=300,
            flaky_percent=5,
            pause_seconds=60,
            fast_lane=True,
            timeout=3600,
        )
    )


# Feature tasks kept as drafts until main goes red (``red_target``).
HELD_FOR_RED = 3

# --- the plan and the repository ---------------------------------------------------------------


def plan(run: LandingRun) -> list[dict]:
    """The tasks in claim order: ``{title, paths, spec}``; units claimed together stay together."""
    shared = run.tasks // 5
    units = [[("rename", k), ("call", k)] for k in range(run.pairs)]
    left, section = shared, 0
    while left > 0:
        units.append([("shared", section)] * min(run.group, left))
        left, section = left - run.group, section + 1
    units += [[("feature", None)] for _ in range(run.tasks - shared - 2 * run.pairs)]
    random.Random(run.seed).shuffle(units)
    items = []
    for kind, pair in (item for unit in units for item in unit):
        n = len(items)
        spec = {"kind": kind, "n": n}
        if kind == "shared":
            spec["section"] = pair
        elif pair is not None:
            spec["pair"] = pair
        if kind == "call" and pair == 0:
            spec["unreadable"] = True  # its failure, once merged, is a report no parser reads
        if kind == "shared":
            title, paths = f"Register E{n} in registry.py", ["registry.py"]
        elif kind == "rename":
            title = f"Rename old_{pair} to new_{pair}"
            paths = [f"semantic_{pair}.py", f"tests/test_semantic_{pair}*.py"]
        elif kind == "call":
            title = f"Test semantic_{pair} at {2 * pair}"
            paths = [f"tests/test_semantic_{pair}_more.py"]
        else:
            title, paths = f"Add feature_{n}", [f"feature_{n}.py", f"tests/test_feature_{n}.py"]
        items.append({"title": title, "paths": paths, "spec": spec})
    if run.red_seconds:
        # Published only once main is red, so there is work to submit and verify meanwhile
        # however fast the rest went.
        for item in [i for i in items if i["spec"]["kind"] == "feature"][-HELD_FOR_RED:]:
            item["spec"]["held"] = True
    return items


class Origin:
    """The project's bare repository, and a clone where a person commits to main."""

    def __init__(self, folder: Path, pairs: int, sections: int, flaky_percent: float = 0):
        folder.mkdir(parents=True)
        self.bare = folder / "origin.git"
        self.person = folder / "person"
        self.url = f"file://{self.bare}"
        git(folder, "init", "-q", "--bare", "-b", "main", str(self.bare))
        # Every move of every branch is logged: the fast-forward invariant reads it back.
        git(self.bare, "config", "core.logAllRefUpdates", "always")
        git(folder, "clone", "-q", str(self.bare), str(self.person))
        files = {
            "run_tests.py": RUN_TESTS,
            "registry.py": registry(sections),
            "tests/__init__.py": "",
            "tests/test_registry.py": REGISTRY_TEST,
        }
        if flaky_percent:
            for name in FLAKY:
                files[f"tests/test_flaky_{name}.py"] = FLAKY_TEST.format(
                    name=name.upper(), share=flaky_percent / 100
                )
        for k in range(pairs):
            files[f"semantic_{k}.py"] = f"def old_{k}(x):\n    return x + {k}\n"
            files[f"tests/test_semantic_{k}.py"] = (
                f"import unittest\n\nfrom semantic_{k} import old_{k}\n\n\n"
                f"class Semantic{k}Test(unittest.TestCase):\n"
                f"    def test_one(self):\n        self.assertEqual(old_{k}(1), {1 + k})\n"
            )
        for name, text in files.items():
            (self.person / name).parent.mkdir(parents=True, exist_ok=True)
            (self.person / name).write_text(text)
        git(self.person, "checkout", "-q", "-b", "main")
        git(self.person, "add", "-A")
        git(self.person, "commit", "-q", "-m", "base")
        git(self.person, "push", "-q", "origin", "main")
        self.base = git(self.bare, "rev-parse", "main")
        self.pushed: list[str] = []

    def person_pushes(self, n: int, kind: str = "person") -> str:
        """Someone commits a change straight to main and pushes it (retrying if the lander
        moved main meanwhile, as a person would): a passing one (``person``), a failing
        test (``red``), the failing test taken out again (``mend``), or the flaky tests
        taken out (``unflake``)."""
        for _ in range(10):
            git(self.person, "fetch", "-q", "origin")
            git(self.person, "checkout", "-q", "-f", "-B", "main", "origin/main")
            red = self.person / "tests" / "test_red.py"
            if kind == "red":
                red.write_text(RED_TEST)
            elif kind == "mend":
                red.unlink(missing_ok=True)
            elif kind == "unflake":
                for name in FLAKY:
                    (self.person / "tests" / f"test_flaky_{name}.py").unlink(missing_ok=True)
            else:
                edit(self.person, {"kind": "person", "n": n})
            git(self.person, "add", "-A")
            git(self.person, "commit", "-q", "-m", f"a person's commit {n} ({kind})")
            try:
                git(self.person, "push", "-q", "origin", "main")
            except subprocess.CalledProcessError:
                continue
            commit = git(self.person, "rev-parse", "HEAD")
            self.pushed.append(commit)
            return commit
        raise RuntimeError("a person could not push to main ten times over")


# --- the run -------------------------------------------------------------------------------


def _open_to_the_sandbox(path: Path) -> None:
    """The sandbox's user must pass through the run's folder to the mirror and workspaces."""
    for folder in (path, *path.parents):
        if folder in (Path("/tmp"), Path("/")):
            break
        folder.chmod(folder.stat().st_mode | 0o711)


def _redis_del(*keys: str) -> None:
    subprocess.run(["redis-cli", "-n", str(REDIS_DB), "del", *keys], capture_output=True)


def _query(url: str, sql: str, args=()) -> list | None:
    with (
        contextlib.suppress(psycopg.OperationalError),
        psycopg.connect(url, connect_timeout=3) as conn,
    ):
        return conn.execute(sql, args).fetchall()
    return None


def _done(url: str) -> int:
    rows = _query(url, "SELECT count(*) FROM tasks_task WHERE state = 'done'")
    return rows[0][0] if rows else -1


def _active_batch(url: str, states=ACTIVE) -> tuple | None:
    rows = _query(
        url,
        "SELECT id, state FROM landing_batch WHERE state = ANY(%s) ORDER BY id LIMIT 1",
        (list(states),),
    )
    return rows[0] if rows else None


def _wait_for_batch(url: str, states, deadline: float, stop: threading.Event) -> tuple | None:
    """The first batch in ``states``, asked every 50 ms until ``deadline`` or ``stop``."""
    while time.monotonic() < deadline and not stop.is_set():
        if batch := _active_batch(url, states):
            return batch
        stop.wait(0.05)
    return None


class Runners:
    """The runner machines' workers: real Celery workers taking the queue ``verify`` (the
    runner's jobs) and others taking ``land`` (the landers'), as the Procfile's ``runner``
    and ``lander``; killed with SIGKILL and started again."""

    def __init__(self, stack: Stack, runners: int, landers: int):
        self.stack, self.started = stack, 0
        self.counts = {"verify": runners, "land": landers}
        self.workers: list[subprocess.Popen] = []
        self.start_all()

    def start_all(self) -> None:
        for queue, count in self.counts.items():
            for _ in range(count):
                self.start(queue)

    def start(self, queue: str) -> None:
        name = f"{'runner' if queue == 'verify' else 'lander'}{self.started}"
        log = open(self.stack.work / f"{name}.log", "ab")  # noqa: SIM115
        self.workers.append(
            celery_worker(env=self.stack.env, queue=queue, name=f"{name}@%h", log=log)
        )
        self.started += 1

    def kill_all(self) -> int:
        killed = 0
        for worker in self.workers:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(worker.pid, signal.SIGKILL)
                killed += 1
            worker.wait(timeout=30)
        self.workers = []
        self.start_all()
        return killed

    def stop(self) -> None:
        for worker in self.workers:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(worker.pid, signal.SIGTERM)
        for worker in self.workers:
            try:
                worker.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)


def _now(url: str):
    """The database's clock (the batches' and gate runs' times are written by it)."""
    rows = _query(url, "SELECT now()")
    return rows[0][0] if rows else None


def red_target(run: LandingRun, stack: Stack, origin: Origin, stop: threading.Event, batch):
    """A person breaks main with a failing test and mends it ``red_seconds`` later; the
    manager publishes the tasks held for it meanwhile (``plan``)."""
    began = _now(stack.url)
    red = origin.person_pushes(len(origin.pushed), kind="red")
    manager = httpx.Client(
        base_url=f"{stack.base}/api/v1",
        headers={"Authorization": f"Bearer {run.manager_token}"},
        timeout=60,
    )
    with manager:
        held = manager.get("/tasks/", params={"project": "PL", "state": "draft"}).json()
        for task in held.get("results", held) if isinstance(held, dict) else held:
            manager.post(f"/tasks/{task['key']}/publish/")
    stop.wait(run.red_seconds)  # mended even when the run is stopping: main ends green
    mended = origin.person_pushes(len(origin.pushed), kind="mend")
    run.faults.append(
        {
            "kind": "red_target",
            "commit": red,
            "mended_by": mended,
            "from": began.isoformat(),
            "to": _now(stack.url).isoformat(),
            "batch": batch and list(batch),
        }
    )


def _manager(run: LandingRun, stack: Stack) -> httpx.Client:
    return httpx.Client(
        base_url=f"{stack.base}/api/v1",
        headers={"Authorization": f"Bearer {run.manager_token}"},
        timeout=60,
    )


def pause_landing(run: LandingRun, stack: Stack, stop: threading.Event) -> None:
    """A manager pauses landing for ``pause_seconds`` and resumes it: no batch may start
    meanwhile (``paused_landing_started_nothing``). With ``fast_lane`` she also puts the last
    queued change first while landing is paused: the queue only builds up then, so the
    request always has a change to overtake (a short run rarely holds two queued at once
    otherwise). The pause lasts until that request is made, a minute longer at most."""
    with _manager(run, stack) as manager:
        paused = manager.post("/projects/PL/landing/pause/", json={"reason": "proof: a freeze"})
        stop.wait(run.pause_seconds)  # resumed even when the run is stopping
        if run.fast_lane:
            fast_lane(run, stack, stop, within=60)
        resumed = manager.post("/projects/PL/landing/resume/", json={"reason": "proof: thawed"})
    run.faults.append(
        {"kind": "pause", "paused": paused.status_code, "resumed": resumed.status_code}
    )


def fast_lane(run: LandingRun, stack: Stack, stop: threading.Event, within: float = 120) -> None:
    """A manager puts the last queued change first, once two or more are queued: it must
    land (or come back) in the first batch to start after the request."""
    deadline = time.monotonic() + within
    with _manager(run, stack) as manager:
        while time.monotonic() < deadline and not stop.is_set():
            queue = [
                row
                for row in manager.get("/projects/PL/landing/").json()["queue"]
                if row["state"] == "queued"
            ]
            if len(queue) >= 2:
                key = queue[-1]["task"]
                rows = _query(stack.url, "SELECT coalesce(max(id), 0) FROM landing_batch")
                before = rows[0][0] if rows else None
                answer = manager.post(
                    f"/projects/PL/landing/{key}/fast/", json={"reason": "proof: the hotfix"}
                )
                if answer.status_code == 200:
                    run.faults.append(
                        {"kind": "fast_lane", "task": key, "last_batch_before": before}
                    )
                    return
            stop.wait(0.5)


def faults(run: LandingRun, stack: Stack, origin: Origin, runners: Runners, stop: threading.Event):
    """Kills, person pushes, a red target, a pause and a fast-lane request, spread over the
    run by progress: each waits
    until its share of the tasks is done, then for a batch in the state it wants to hit (a
    kill: any active state; a push: verifying, so the lander's push finds main moved; the
    red target: building or verifying, so the lander meets it)."""
    events = [((k + 1) / (run.kills + 1), "kill") for k in range(run.kills)]
    events += [((k + 0.5) / (run.pushes + 0.5), "push") for k in range(run.pushes)]
    if run.red_seconds:
        # Early enough that agents still have work to submit while main is red.
        events.append((0.4, "red"))
    if run.pause_seconds:
        events.append((0.3, "pause"))
    if run.fast_lane and not run.pause_seconds:
        events.append((0.6, "fast"))
    for fraction, kind in sorted(events):
        while _done(stack.url) < run.tasks * fraction * 0.9:
            if stop.wait(0.5):
                return
        if kind == "pause":
            pause_landing(run, stack, stop)
            continue
        if kind == "fast":
            fast_lane(run, stack, stop)
            continue
        wanted = {"kill": ACTIVE, "push": ("verifying",), "red": ("building", "verifying")}[kind]
        deadline = time.monotonic() + 120
        batch = _wait_for_batch(stack.url, wanted, deadline, stop)
        if stop.is_set():
            return
        if kind == "red":
            red_target(run, stack, origin, stop, batch)
        elif kind == "kill":
            # A moment into the state, so the kill lands mid-work rather than at its edge. A
            # batch that ended in that moment is not hit: wait for the next one instead.
            at = None
            while batch and time.monotonic() < deadline and not stop.is_set():
                time.sleep(random.uniform(0.1, 0.6))
                at = _active_batch(stack.url)
                if at:
                    break
                batch = _wait_for_batch(stack.url, wanted, deadline, stop)
            if not at:
                continue  # no batch to hit in time: "did what it set out to" says so
            killed = runners.kill_all()
            run.faults.append({"kind": "sigkill_runners", "processes": killed, "batch": list(at)})
        else:
            commit = origin.person_pushes(len(origin.pushed))
            run.faults.append(
                {"kind": "person_push", "commit": commit, "batch": batch and list(batch)}
            )


def team(stack: Stack, tokens: dict, origin: str, stop_file: Path):
    """The coders (``proof.coder``, one per agent token, each with a clone of ``origin``)
    and the reviewer (``proof.agent``), as processes of their own; ``(coders, reviewer)``.
    They finish up once ``stop_file`` exists."""
    coders = [
        _spawn(
            stack,
            [
                *(sys.executable, "-m", "proof.coder", "--base", stack.base, "--token", token),
                *("--journal", str(stack.work / f"coder-{i}.jsonl"), "--stop", str(stop_file)),
                *("--clone", str(stack.work / "clones" / str(i)), "--origin", origin),
            ],
            f"coder-{i}",
        )
        for i, token in enumerate(tokens["agents"])
    ]
    reviewer = _spawn(
        stack,
        [
            *(sys.executable, "-m", "proof.agent", "--base", stack.base),
            *("--token", tokens["reviewer"], "--journal", str(stack.work / "reviewer-0.jsonl")),
            *("--stop", str(stop_file), "--role", "reviewer"),
        ],
        "reviewer-0",
    )
    return coders, reviewer


def _spawn(stack: Stack, command: list[str], name: str) -> subprocess.Popen:
    return subprocess.Popen(
        command,
        cwd=ROOT,
        env=stack.env,
        stdout=subprocess.DEVNULL,
        stderr=open(stack.work / f"{name}.err", "ab"),
        start_new_session=True,
    )


def execute(run: LandingRun, *, keep: bool = False) -> dict:
    # Without the sandbox every verification errs and the run waits out its timeout.
    Bubblewrap().check()
    env = {
        "FACTORY_RECONCILE_SECONDS": "3",
        # Runner jobs queue behind the lander on the verify workers: re-dispatching a queued
        # one every few seconds would only pile up copies.
        "FACTORY_GATE_REQUEUE_AFTER": "60",
        "FACTORY_GATE_TIME_LIMIT": "30",
        "FACTORY_GATE_GRACE_SECONDS": "5",
        "FACTORY_GATE_MAX_TRIES": "10",
        # A runner killed mid-verification is re-queued by the reconciler after this + grace.
        "FACTORY_RUNNER_TIME_LIMIT": "60",
        # A lander backing off after the red target looks again within seconds, not minutes.
        "FACTORY_LANDING_BACKOFF_SECONDS": "5",
        "FACTORY_LANDING_BACKOFF_MAX_SECONDS": "20",
    }
    stack = Stack(run.name, web_workers=2, gate_workers=1, env=env)
    _open_to_the_sandbox(stack.work)
    items = plan(run)
    sections = 1 + max((i["spec"].get("section", 0) for i in items), default=0)
    origin = Origin(stack.work / "repositories", run.pairs, sections, run.flaky_percent)
    stack.env.update(
        FACTORY_RUNNER_ROOT=str(stack.work / "runner"),
        FACTORY_LOCAL_REPOSITORY_ROOTS=str(stack.work / "repositories"),
    )
    _redis_del("verify", "land")
    stack.create_database()
    (stack.work / "plan.json").write_text(json.dumps(items))
    seeded = subprocess.run(
        [
            *(sys.executable, "-m", "proof.landing_seed", "--plan", str(stack.work / "plan.json")),
            *("--agents", str(run.agents), "--repository", origin.url),
            *("--batch-max", str(run.batch_max), "--out", str(stack.work / "tokens.json")),
            *("--avoid-overlap", "on" if run.avoid_overlap else "off"),
        ],
        cwd=ROOT,
        env=stack.env,
        capture_output=True,
        text=True,
    )
    if seeded.returncode:
        raise RuntimeError(seeded.stderr)
    tokens = json.loads((stack.work / "tokens.json").read_text())
    run.manager_token = tokens["manager"]
    stack.start()
    runners = Runners(stack, run.runners, run.landers)
    began = time.monotonic()
    stop_file = stack.work / "stop"
    agents, reviewer = team(stack, tokens, origin.url, stop_file)
    stop = threading.Event()
    injector = threading.Thread(
        target=faults, args=(run, stack, origin, runners, stop), daemon=True
    )
    injector.start()
    finished = False
    try:
        while time.monotonic() - began < run.timeout:
            if _done(stack.url) == run.tasks:
                finished = True
                break
            time.sleep(1)
        elapsed = time.monotonic() - began
        carried = {"violations": 0, "skipped": "the run did not finish"}
        if finished:
            if run.flaky_percent:
                # The team fixes its flaky tests: the check of a carried approval below
                # follows one task's attempts by number, which a coin at its runner would undo.
                origin.person_pushes(len(origin.pushed), kind="unflake")
            carried = _carried_approval(stack, tokens, origin, [*agents, reviewer], stop_file)
    finally:
        stop.set()
        injector.join(timeout=130)
        stop_file.touch()
        for process in [*agents, reviewer]:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        stack.manage("reconcile", check=False)
        runners.stop()
        stack.stop()
    journals = sorted(stack.work.glob("*.jsonl"))
    statuses = Counter()
    for status_file in stack.work.glob("*.status.json"):
        statuses.update(json.loads(status_file.read_text()))
    invariants = check_all(stack.url, journals, stack.work / "media", expect_all_done=finished)
    figures, checks = landing_invariants(
        run, stack.url, origin, journals, apart=(carried.get("task", ""),)
    )
    invariants.update(checks)
    invariants["approval_carried_only_to_the_same_bytes"] = carried
    violations = sum(check["violations"] for check in invariants.values()) + (0 if finished else 1)
    done = _done(stack.url) - (carried.get("again_state") == "done")  # the proof's own task
    result = {
        "scenario": run.name,
        "agents": run.agents,
        "tasks": run.tasks,
        "tasks_done": done,
        "finished": finished,
        "seconds": round(elapsed, 1),
        "tasks_per_second": round(done / elapsed, 2) if elapsed else None,
        "policy": "runner (required) on every submission; landing push, squash, "
        f"batch_max {run.batch_max}; {run.runners} runner and {run.landers} lander workers",
        "faults_injected": len(run.faults),
        "faults": run.faults,
        "requests": sum(statuses.values()),
        "statuses": dict(sorted(statuses.items())),
        "landing": figures,
        "invariants": invariants,
        "violations": violations,
        "ok": violations == 0,
        "work_dir": str(stack.work) if keep else None,
    }
    if not keep:
        stack.drop()
    _redis_del("verify", "land")
    return result


def _carried_approval(stack: Stack, tokens: dict, origin: Origin, processes, stop_file) -> dict:
    """Once the agents and the reviewer have stopped: an approval copied across a whitespace
    change must go to review, and the approved bytes again carry it (``proof.carry``)."""
    stop_file.touch()
    for process in processes:
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
    try:
        result = carry.run(stack.base, tokens, origin.url, stack.work)
    except Exception as exc:  # the check could not be made: a violation, saying why
        return {"violations": 1, "error": repr(exc)[:500]}
    return {**result, "violations": result["violations"]}


# --- the invariants ------------------------------------------------------------------------


def _trailers(message: str) -> dict:
    return dict(re.findall(r"^(Factory-Task|Factory-Attempt): (\S+)$", message, re.MULTILINE))


def _passes(bare: Path, commit: str, excused: set[str]) -> tuple[str, bool, str, list[str]]:
    """Check ``commit`` out into a folder of its own and run the verify command there, the
    flaky tests' coins live: ``recheck`` reads the outcome (``excused``: tests whose failure
    is not the commit's)."""
    with tempfile.TemporaryDirectory(prefix="landed-") as folder:
        archive = subprocess.run(
            ["git", "archive", "--format=tar", commit], cwd=bare, env=GIT_ENV, capture_output=True
        )
        subprocess.run(["tar", "-x", "-C", folder], input=archive.stdout, check=True)
        done = subprocess.run(
            ["python3", "run_tests.py"], cwd=folder, capture_output=True, text=True, timeout=120
        )
        report = Path(folder) / "reports" / "junit.xml"
        junit = report.read_bytes() if report.exists() else None
        ok, flaked, why = recheck(done.returncode, junit, excused)
        return commit, ok, why or done.stderr[-300:], flaked


def junit_failing(junit: bytes) -> list[str]:
    """The ids (``tests/test_x.py::Class::name``, as the lander names them) of the cases
    that failed or erred in the suite's JUnit report; ``ET.ParseError`` if unreadable."""
    failing = []
    for case in ET.fromstring(junit).iter("testcase"):
        if case.find("failure") is None and case.find("error") is None:
            continue
        parts = case.get("classname", "").split(".")
        # The module is the longest prefix ending in a test module (tests.test_x.Class).
        split = max((i + 1 for i, part in enumerate(parts) if part.startswith("test_")), default=1)
        module = "/".join(parts[:split]) + ".py"
        failing.append("::".join([module, *parts[split:], case.get("name", "")]))
    return failing


def recheck(returncode: int, junit: bytes | None, excused: set[str]) -> tuple[bool, list, str]:
    """(passed, excused tests that failed, why not): a landed commit passes when its suite
    passes, or when every test that failed is ``excused`` (a flaky test of the plan, or one
    the project quarantined) and nothing else went wrong. Any other failure, a failing exit
    with no failing test named, or an unreadable report is the commit's."""
    if returncode == 0:
        return True, [], ""
    if junit is None:
        return False, [], "it failed and wrote no JUnit report"
    try:
        failing = junit_failing(junit)
    except ET.ParseError as exc:
        return False, [], f"its JUnit report cannot be read: {exc}"
    if not failing:
        return False, [], "it failed, and its report names no failing test"
    theirs = [test for test in failing if test not in excused]
    if theirs:
        return False, [], f"failing: {', '.join(theirs[:5])}"
    return True, failing, ""


QUARANTINED = "SELECT test FROM landing_flakytest WHERE quarantined"


def landing_invariants(
    run: LandingRun, url: str, origin: Origin, journals: list[Path], apart: tuple[str, ...] = ()
):
    """(figures, checks): what the queue did, and the promises checked with SQL and git.
    ``apart``: tasks the proof made for a check of its own (``proof.carry``), not planned."""
    bare = origin.bare
    chain = git(bare, "rev-list", "--first-parent", "--reverse", f"{origin.base}..main").split()
    trailers = {c: _trailers(git(bare, "log", "-1", "--format=%B", c)) for c in chain}
    ours = [c for c in chain if "Factory-Task" in trailers[c]]
    position = {c: i for i, c in enumerate(chain)}
    checks = {}

    # 1. The target only moved forward: every move the origin logged is a fast-forward.
    found, moves = [], 0
    log = bare / "logs" / "refs" / "heads" / "main"
    for line in log.read_text().splitlines():
        old, new = line.split()[:2]
        if set(old) == {"0"}:
            continue
        moves += 1
        try:
            git(bare, "merge-base", "--is-ancestor", old, new)
        except subprocess.CalledProcessError:
            found.append(f"main moved {old[:12]} → {new[:12]}, not a fast-forward")
    checks["target_only_fast_forwarded"] = {
        "violations": len(found),
        "moves": moves,
        "examples": found[:5],
    }

    # 2. Every commit Factory Memory put on main passes its non-quarantined tests, checked
    #    out now and run as it is: a failure of a planned flaky test (a coin whatever the
    #    tree) or of a quarantined one is not the commit's; any other failure is.
    quarantined = {row[0] for row in _query(url, QUARANTINED) or []}
    excused = flaky_ids() | quarantined
    sample = ours[:: run.check_every]
    with ThreadPoolExecutor(max_workers=2) as pool:
        outcomes = list(pool.map(lambda c: _passes(bare, c, excused), sample))
    found = [f"{c[:12]} fails: {err}" for c, ok, err, _ in outcomes if not ok]
    checks["landed_commits_pass"] = {
        "violations": len(found),
        "checked": len(sample),
        "of": len(ours),
        "sample": "all" if run.check_every == 1 else f"every {run.check_every}th",
        "flaky_failures_excused": sum(len(flaked) for *_, flaked in outcomes),
        "quarantined": sorted(quarantined),
        "examples": found[:5],
    }

    with psycopg.connect(url) as conn:
        task_type = conn.execute(
            "SELECT id FROM django_content_type WHERE app_label = 'tasks' AND model = 'task'"
        ).fetchone()[0]
        lands = Counter(
            dict(
                conn.execute(
                    "SELECT object_id, count(*) FROM tasks_event WHERE content_type_id = %s"
                    " AND transition = 'land' GROUP BY object_id",
                    (task_type,),
                ).fetchall()
            )
        )
        approved = conn.execute(
            """
            SELECT a.id, t.id, t.key, t.state, t.landed_commit, t.current_attempt_id,
                   a.landing, a.queued_at
            FROM tasks_attempt a JOIN tasks_task t ON t.id = a.task_id
            WHERE a.state = 'approved' ORDER BY a.id
            """
        ).fetchall()
        tasks = conn.execute("SELECT id, key, state, landed_commit FROM tasks_task").fetchall()
        batches = conn.execute(
            "SELECT id, state, verify_runs, bisect_steps, pushes, reason, changes, base,"
            " started_at, reruns, flaky FROM landing_batch ORDER BY id"
        ).fetchall()
        pauses = conn.execute(
            "SELECT transition, created_at FROM tasks_event"
            " WHERE transition IN ('pause', 'unpause') ORDER BY id"
        ).fetchall()
        flaky_recorded = dict(conn.execute("SELECT test, flakes FROM landing_flakytest").fetchall())
        red = next((f for f in run.faults if f["kind"] == "red_target"), None)
        # Submissions the runner verified while main was red: the landers' queue is apart.
        verified_while_red, waited_while_red = (
            conn.execute(
                "SELECT count(*), max(extract(epoch FROM started_at - queued_at))"
                " FROM evidence_gaterun WHERE gate = 'runner'"
                " AND finished_at BETWEEN %s AND %s",
                (red["from"], red["to"]),
            ).fetchone()
            if red
            else (0, None)
        )
        backed_off = conn.execute(
            "SELECT count(*) FROM tasks_event WHERE transition = 'back_off'"
        ).fetchone()[0]
        land_times = conn.execute(
            "SELECT object_key, created_at FROM tasks_event WHERE content_type_id = %s"
            " AND transition = 'land'",
            (task_type,),
        ).fetchall()

    # 3. Every approved change landed exactly once, or came back with a reason.
    on_main = Counter(trailers[c].get("Factory-Attempt") for c in ours)
    found = [f"attempt {a} is on main {n} times" for a, n in on_main.items() if n > 1]
    found += [f"task {t} has {n} land events" for t, n in lands.items() if n > 1]
    landed_attempts = {}
    for attempt, task_id, key, _state, landed, _current, landing, queued_at in approved:
        kind = landing.get("state")
        if kind == "landed":
            landed_attempts[attempt] = (landing.get("landed"), queued_at, key)
            where = [c for c in ours if trailers[c].get("Factory-Attempt") == str(attempt)]
            if len(where) != 1 or where[0] != landing.get("landed") or landed != where[0]:
                found.append(
                    f"{key} attempt {attempt}: landed at {landing.get('landed')}, on main {where}"
                )
            if lands.get(task_id) != 1:
                found.append(f"{key}: {lands.get(task_id)} land events")
            if trailers.get(landed, {}).get("Factory-Task") != key:
                found.append(f"{key}: its landed commit names {trailers.get(landed)}")
        elif kind in ("conflict", "failed"):
            if not (landing.get("reason") or "").strip():
                found.append(f"{key} attempt {attempt} came back ({kind}) without a reason")
        else:
            found.append(
                f"{key} attempt {attempt} approved, landing {kind!r}: neither landed nor back"
            )
    unknown = [c for c in ours if int(trailers[c]["Factory-Attempt"]) not in landed_attempts]
    found += [f"{c[:12]} on main, its attempt not recorded as landed" for c in unknown]
    found += [
        f"{key} is done but landed nowhere ({landed})"
        for _, key, state, landed in tasks
        if state == "done" and landed not in position
    ]
    checks["landed_once_or_returned"] = {
        "violations": len(found),
        "landed": len(landed_attempts),
        "returned": sum(1 for row in approved if row[6].get("state") in ("conflict", "failed")),
        "examples": found[:5],
    }

    # 4. FIFO: no change landed after more than batch_max changes approved after it.
    found, worst = [], 0
    order = sorted(landed_attempts.items(), key=lambda item: position[item[1][0]])
    for index, (_, (_, queued_at, key)) in enumerate(order):
        overtaken = sum(1 for _, (_, later, _) in order[:index] if later > queued_at)
        worst = max(worst, overtaken)
        if overtaken > run.batch_max:
            found.append(f"{key} landed after {overtaken} changes approved after it")
    checks["fifo"] = {"violations": len(found), "most_overtaken": worst, "examples": found[:5]}

    # 5. No batch left active.
    found = [f"batch {b[0]} left {b[1]}" for b in batches if b[1] in ACTIVE]
    checks["no_active_batch"] = {"violations": len(found), "examples": found[:5]}

    # 6. After a batch that verified erred, no batch verified again on the same target tip
    #    with the same change first in the queue (no manager asks in this run).
    found, erred = [], {}
    for batch_id, state, runs, _, _, _, changes, base, *_ in batches:
        key = (base, changes[0]["attempt"] if changes else None)
        if runs and key in erred:
            found.append(
                f"batch {batch_id} verified again at {base[:12]} with attempt {key[1]} "
                f"after batch {erred[key]} erred there"
            )
        if state == "error" and runs:
            erred.setdefault(key, batch_id)
    checks["one_verification_per_tip_and_head"] = {
        "violations": len(found),
        "erred_tips_and_heads": len(erred),
        "examples": found[:5],
    }

    # 7. A flaky test returned nobody's change: no change came back naming one as failing,
    #    and none was held for one (no planned change touches the flaky tests' files).
    flaky = flaky_ids()
    found = [
        f"{row[2]} came back naming a flaky test: {row[6].get('reason', '')[:200]}"
        for row in approved
        if row[6].get("state") in ("conflict", "failed")
        and (set(row[6].get("failing") or []) & flaky or row[6].get("flaky"))
    ]
    checks["no_change_returned_for_a_flake"] = {
        "violations": len(found),
        "examples": found[:5],
    }

    # 8. While landing was paused no batch started; the fast-lane change landed (or came
    #    back) in the first batch to start after the request.
    found, windows = [], []
    for (first, at), (second, until) in zip(pauses[::2], pauses[1::2], strict=False):
        if (first, second) == ("pause", "unpause"):
            windows.append((at, until))
    # A second of grace: the lander asks just before it starts a batch, and the pause may
    # have been written in between.
    grace = timedelta(seconds=1)
    found += [
        f"batch {b[0]} started at {b[8].isoformat()} while landing was paused"
        for b in batches
        for at, until in windows
        if at + grace < b[8] < until
    ]
    fast = next((f for f in run.faults if f["kind"] == "fast_lane"), None)
    if fast is not None:
        # The batches that reached a verdict after the request (an erring one, on a red
        # main, lands nothing for anyone); the first may have started as the request was
        # made, so the fast change must be in one of the first two.
        after = [b for b in batches if b[0] > fast["last_batch_before"] and b[1] not in
                 ("error", "abandoned", *ACTIVE)]  # fmt: skip
        carried = [
            b[0]
            for b in after[:2]
            if any(c.get("task") == fast["task"] and c.get("outcome") != "queued" for c in b[6])
        ]
        if not carried:
            found.append(
                f"{fast['task']} (fast lane) was in neither of the first two batches after its "
                f"request ({[b[0] for b in after[:2]]})"
            )
    checks["paused_and_fast_lane_kept"] = {
        "violations": len(found),
        "pauses": len(windows),
        "examples": found[:5],
    }

    # What the run did; and whether it did what it set out to (else it proved less).
    returns = Counter(row[6].get("state") for row in approved if row[2] not in apart)
    retries = [json.loads(line) for j in journals for line in j.read_text().splitlines()]
    retries = [fact for fact in retries if "retry" in fact]
    settled = [b for b in batches if "its lander stopped" in (b[5] or "")]
    states = Counter(b[1] for b in batches)
    unreadable = [
        row for row in approved if "JUnit report cannot be read" in (row[6].get("reason") or "")
    ]
    on_red = [b for b in batches if red and b[7] == red["commit"]]
    figures = {
        "main_commits": len(chain),
        "landed_commits": len(ours),
        "person_commits": len(chain) - len(ours),
        "textual_conflicts": returns["conflict"],
        "semantic_failures": returns["failed"],
        "avoid_overlap": run.avoid_overlap,
        "conflicts_per_100_tasks": round(100 * returns["conflict"] / run.tasks, 1),
        "returns_per_100_tasks": round(
            100 * (returns["conflict"] + returns["failed"]) / run.tasks, 1
        ),
        "retries_journaled": len(retries),
        "retries_after": dict(Counter(fact["after"] for fact in retries)),
        "retried_sensibly": sum(fact.get("sensible", False) for fact in retries),
        # Made again on a main that already had what it came back against (the agent waits
        # up to 15 s for it: a change comes back while its batch is still being landed).
        "retried_on_what_it_clashed_with": sum(
            fact.get("clashed_with_on_main", False) for fact in retries
        ),
        "retry_waits_seconds": sum(fact.get("waited", 0) for fact in retries),
        "batches": len(batches),
        "batch_states": dict(states),
        "verify_runs": sum(b[2] for b in batches),
        "bisect_steps": sum(b[3] for b in batches),
        "pushes_refused_and_rebuilt": sum(max(0, b[4] - 1) for b in batches),
        "batches_settled_after_a_kill": len(settled),
        "mean_batch_size": round(sum(len(b[6]) for b in batches) / len(batches), 2)
        if batches
        else None,
        "unreadable_junit_returned": len(unreadable),
        # The planned tasks only: the carried-approval check lands one of its own afterwards.
        "throughput": throughput(
            [at for key, at in land_times if key not in apart],
            [row[7] for row in approved if row[2] not in apart and row[7] is not None],
        ),
        "reruns": sum(b[9] for b in batches),
        "flaky_tests_recorded": flaky_recorded,
        "batches_naming_a_flake": sum(bool(b[10]) for b in batches),
        "red_target": {
            "seconds": run.red_seconds,
            "batches_on_red_tip": len(on_red),
            "verify_runs_on_red_tip": sum(b[2] for b in on_red),
            "error_batches_on_red_tip": sum(b[1] == "error" for b in on_red),
            "back_off_events": backed_off,
            "submissions_verified_meanwhile": verified_while_red,
            # From queued to started: how long a submission's run waited for a runner.
            "their_longest_wait_seconds": round(float(waited_while_red), 1)
            if waited_while_red is not None
            else None,
        }
        if red
        else None,
    }
    kills = [f for f in run.faults if f["kind"] == "sigkill_runners" and f["batch"]]
    pushes = [f for f in run.faults if f["kind"] == "person_push"]
    found = []
    if len(kills) < run.kills:
        found.append(f"{len(kills)} of {run.kills} kills hit an active batch")
    if len(pushes) < run.pushes:
        found.append(f"{len(pushes)} of {run.pushes} person pushes")
    if run.pairs and not unreadable and not run.avoid_overlap:
        found.append("no change came back for a JUnit report that cannot be read")
    if run.flaky_percent and not flaky_recorded:
        found.append("no flaky test was ever seen to flake")
    if run.pause_seconds and not windows:
        found.append("landing was never paused and resumed")
    if run.fast_lane and fast is None:
        found.append("no change was put in the fast lane")
    if run.red_seconds and red is None:
        found.append("main was never red")
    elif red is not None:
        if not any(b[1] == "error" for b in on_red):
            found.append("the lander never met the red target")
        if not verified_while_red:
            found.append("no submission was verified while main was red")
    # With overlap avoided the planned clashes are meant not to happen: nothing to require.
    if returns["failed"] < run.pairs and not run.avoid_overlap:
        found.append(f"{returns['failed']} semantic failures, {run.pairs} planned")
    if returns["conflict"] < 1 and not run.avoid_overlap:
        found.append("no textual conflict happened")
    if len(retries) < returns["conflict"] + returns["failed"]:
        found.append(
            f"{len(retries)} claims saw a returned change, "
            f"{returns['conflict'] + returns['failed']} changes came back"
        )
    blind = [
        f"{fact['retry']} made again on the main its returned attempt was made on"
        for fact in retries
        if not fact.get("sensible")
    ]
    found += blind[:3]
    checks["did_what_it_set_out_to"] = {
        "violations": len(found) + max(0, len(blind) - 3),
        "examples": found,
    }
    return figures, checks
