"""The proof scenarios: load, and load under each kind of fault.

Each one starts the production profile, lets agent processes work every task through
the HTTP API while a reviewer approves, injects its faults, waits for the work to end,
lets the reconciler run, and checks the invariants. The result is one JSON object.
"""

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import psycopg

from proof.invariants import check_all
from proof.stack import ROOT, Stack

# Short timings so that faults are detected and repaired within a run.
FAST_RECOVERY = {
    "FACTORY_RECONCILE_SECONDS": "3",
    "FACTORY_GATE_REQUEUE_AFTER": "5",
    "FACTORY_GATE_TIME_LIMIT": "15",
    "FACTORY_GATE_GRACE_SECONDS": "5",
    "FACTORY_GATE_MAX_TRIES": "10",
}


@dataclass
class Run:
    name: str
    agents: int
    tasks: int
    lease: int = 60
    gates: dict = field(default_factory=lambda: {"tests-pass": {}, "diff-scope": {}})
    timeout: float = 1800
    env: dict = field(default_factory=dict)
    faults: int = 0
    processes: list = field(default_factory=list)


def _spawn_agent(
    stack: Stack, run: Run, token: str, index: int, role: str = "agent", share: str = "0/1"
) -> subprocess.Popen:
    journal = stack.work / f"{role}-{index}.jsonl"
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "proof.agent",
            "--base",
            stack.base,
            "--token",
            token,
            "--journal",
            str(journal),
            "--stop",
            str(stack.work / "stop"),
            "--lease",
            str(run.lease),
            "--role",
            role,
            "--share",
            share,
        ],
        cwd=ROOT,
        env=stack.env,
        stdout=subprocess.DEVNULL,
        stderr=open(stack.work / f"{role}-{index}.err", "ab"),
        start_new_session=True,
    )


def _done(url: str) -> int:
    with (
        contextlib.suppress(psycopg.OperationalError),
        psycopg.connect(url, connect_timeout=3) as conn,
    ):
        return conn.execute("SELECT count(*) FROM tasks_task WHERE state = 'done'").fetchone()[0]
    return -1


def execute(run: Run, inject=None, *, keep: bool = False) -> dict:
    stack = Stack(run.name, env={**FAST_RECOVERY, **run.env})
    tokens_file = stack.work / "tokens.json"
    stack.create_database()
    seeded = subprocess.run(
        [
            sys.executable,
            "-m",
            "proof.seed",
            "--tasks",
            str(run.tasks),
            "--agents",
            str(run.agents),
            "--out",
            str(tokens_file),
            "--gates",
            json.dumps(run.gates),
        ],
        cwd=ROOT,
        env=stack.env,
        capture_output=True,
        text=True,
    )
    if seeded.returncode:
        raise RuntimeError(seeded.stderr)
    tokens = json.loads(tokens_file.read_text())
    stack.start()
    began = time.monotonic()
    run.processes = [_spawn_agent(stack, run, token, i) for i, token in enumerate(tokens["agents"])]
    # Enough reviewers to keep up with the agents; each takes its share of the task numbers.
    count = max(1, run.agents // 8)
    reviewers = [
        _spawn_agent(stack, run, tokens["reviewer"], i, role="reviewer", share=f"{i}/{count}")
        for i in range(count)
    ]
    stop_faults = threading.Event()
    injector = (
        threading.Thread(target=inject, args=(stack, run, tokens, stop_faults), daemon=True)
        if inject
        else None
    )
    if injector:
        injector.start()
    finished = False
    try:
        while time.monotonic() - began < run.timeout:
            if _done(stack.url) == run.tasks:
                finished = True
                break
            time.sleep(1)
        elapsed = time.monotonic() - began
    finally:
        stop_faults.set()
        if injector:
            injector.join(timeout=120)
        (stack.work / "stop").touch()
        for process in [*run.processes, *reviewers]:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        time.sleep(1)
        stack.manage("reconcile", check=False)
        stack.stop()
    journals = sorted(stack.work.glob("*.jsonl"))
    statuses = Counter()
    for status_file in stack.work.glob("*.status.json"):
        statuses.update(json.loads(status_file.read_text()))
    invariants = check_all(stack.url, journals, stack.work / "media", expect_all_done=finished)
    done = _done(stack.url)
    violations = sum(check["violations"] for check in invariants.values()) + (0 if finished else 1)
    result = {
        "scenario": run.name,
        "agents": run.agents,
        "tasks": run.tasks,
        "tasks_done": done,
        "finished": finished,
        "seconds": round(elapsed, 1),
        "tasks_per_second": round(done / elapsed, 2) if elapsed else None,
        "faults_injected": run.faults,
        "requests": sum(v for k, v in statuses.items()),
        "statuses": dict(sorted(statuses.items())),
        "invariants": invariants,
        "violations": violations,
        "ok": violations == 0,
        "work_dir": str(stack.work) if keep else None,
    }
    if not keep:
        stack.drop()
    return result


# --- faults --------------------------------------------------------------------------------


def kill_agents(every: float):
    def inject(stack: Stack, run: Run, tokens: dict, stop: threading.Event):
        index = len(run.processes)
        while not stop.wait(every):
            alive = [p for p in run.processes if p.poll() is None]
            if not alive:
                continue
            victim = random.choice(alive)
            os.killpg(victim.pid, signal.SIGKILL)  # mid-claim, mid-upload, mid-submit: anywhere
            run.processes.remove(victim)
            run.faults += 1
            run.processes.append(_spawn_agent(stack, run, random.choice(tokens["agents"]), index))
            index += 1

    return inject


def kill_workers(every: float):
    def inject(stack: Stack, run: Run, tokens: dict, stop: threading.Event):
        while not stop.wait(every):
            if stack.workers:
                stack.kill_worker(random.choice(stack.workers))
                run.faults += 1
                stack.start_worker()

    return inject


def restart_postgres(every: float, times: int):
    def inject(stack: Stack, run: Run, tokens: dict, stop: threading.Event):
        while run.faults < times and not stop.wait(every):
            stack.restart_postgres()
            run.faults += 1

    return inject


def flush_redis(every: float, times: int):
    def inject(stack: Stack, run: Run, tokens: dict, stop: threading.Event):
        while run.faults < times and not stop.wait(every):
            stack.flush_and_restart_redis()
            run.faults += 1

    return inject


SCENARIOS = {
    "load": lambda short: (
        # 10,000 tasks take about 45 minutes on two cores: the bound is an hour.
        Run("load", agents=8 if short else 64, tasks=200 if short else 10_000, timeout=3600),
        None,
    ),
    "kill-agents": lambda short: (
        Run("kill_agents", agents=6 if short else 32, tasks=120 if short else 2000, lease=5),
        kill_agents(every=2 if short else 1),
    ),
    "kill-workers": lambda short: (
        Run(
            "kill_workers",
            agents=6 if short else 16,
            tasks=80 if short else 300,
            gates={"tests-pass": {}, "diff-scope": {}, "proof-sleep": {"seconds": 0.4}},
            env={"FACTORY_EXTRA_GATES": "proof-sleep=proof.gates.SleepGate"},
        ),
        kill_workers(every=3 if short else 4),
    ),
    "restart-postgres": lambda short: (
        Run("restart_postgres", agents=6 if short else 16, tasks=120 if short else 1000),
        restart_postgres(every=6 if short else 20, times=2 if short else 5),
    ),
    "flush-redis": lambda short: (
        Run("flush_redis", agents=6 if short else 16, tasks=120 if short else 1000),
        flush_redis(every=5 if short else 20, times=1 if short else 4),
    ),
}
