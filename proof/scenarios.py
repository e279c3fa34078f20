"""The proof scenarios: load, and load under each kind of fault.

Each one starts the production profile, lets agent processes work every task through
the HTTP API while a reviewer approves, injects its faults, waits for the work to end,
lets the reconciler run, and checks the invariants. The result is one JSON object.

The webhooks scenario also subscribes a receiver process (``proof/receiver.py``) to every
event type, kills and restarts it during the run, waits for the outbox to drain, and
checks that every typed audit event was received at least once.
"""

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import django
import psycopg
from django.conf import settings

from events.types import type_of
from proof import code_host, landing
from proof import metrics as site_metrics
from proof.invariants import check_all
from proof.stack import REDIS_DB, ROOT, Stack, free_port

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
    webhooks: bool = False  # subscribe a receiver to every event type and check it got them
    receiver: "Receiver | None" = None
    kills_server: bool = False  # a server process may die between a commit and its count
    readyz: list = field(default_factory=list)  # /readyz's answers around each database stop


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
    if hasattr(run, "execute"):  # a scenario with a harness of its own (proof/landing.py)
        return run.execute(keep=keep)
    stack = Stack(run.name, env={**FAST_RECOVERY, **run.env})
    tokens_file = stack.work / "tokens.json"
    stack.create_database()
    run.receiver = Receiver(stack) if run.webhooks else None
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
            *(["--webhook", run.receiver.url] if run.receiver else []),
        ],
        cwd=ROOT,
        env=stack.env,
        capture_output=True,
        text=True,
    )
    if seeded.returncode:
        raise RuntimeError(seeded.stderr)
    tokens = json.loads(tokens_file.read_text())
    if run.receiver:
        run.receiver.secret = tokens["webhook"]["secret"]
        run.receiver.start()
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
        try:
            drained = run.receiver.drain(stack.url) if run.receiver else None
            samples = site_metrics.scrape(stack.base, stack.env["FACTORY_METRICS_TOKEN"])
        finally:
            stack.stop()
            if run.receiver:
                run.receiver.kill()
    journals = sorted(stack.work.glob("*.jsonl"))
    statuses = Counter()
    for status_file in stack.work.glob("*.status.json"):
        statuses.update(json.loads(status_file.read_text()))
    invariants = check_all(stack.url, journals, stack.work / "media", expect_all_done=finished)
    metrics = site_metrics.compare(
        samples,
        stack.url,
        _journaled(journals),
        statuses,
        exact_db=not run.kills_server,
        exact_agents=run.faults == 0,
    )
    invariants["metrics_agree"] = {
        "violations": metrics["violations"],
        "examples": metrics["examples"],
    }
    webhooks = None
    if run.receiver:
        django_for_the_harness(stack.env)
        webhooks = webhooks_received(stack.url, tokens["webhook"]["id"], run.receiver.log)
        webhooks.update(
            receiver_restarts=run.receiver.restarts,
            drain=drained,
            worker_job_errors=_job_errors(stack.work),
        )
        invariants["webhooks_all_received"] = {
            "violations": webhooks.pop("violations"),
            "examples": webhooks.pop("examples"),
        }
    if run.readyz:
        invariants["readyz_follows_the_database"] = readyz_followed_the_database(run.readyz)
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
        **({"webhooks": webhooks} if webhooks else {}),
        "metrics": metrics["figures"],
        **({"readyz": run.readyz} if run.readyz else {}),
        "invariants": invariants,
        "violations": violations,
        "ok": violations == 0,
        "work_dir": str(stack.work) if keep else None,
    }
    if not keep:
        stack.drop()
    return result


def _journaled(journals: list[Path]) -> Counter:
    """How many claims and submits the agents' journals acknowledged."""
    facts = Counter()
    for journal in journals:
        for line in journal.read_text().splitlines():
            with contextlib.suppress(ValueError):
                fact = json.loads(line)
                facts.update(key for key in ("claimed", "submitted") if key in fact)
    return facts


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
    """Stop PostgreSQL (immediate: connections die mid-flight) and start it again, ``times``
    times; while it is down /readyz must answer 503 naming the database, and 200 once it is
    back (``readyz_follows_the_database``)."""

    def inject(stack: Stack, run: Run, tokens: dict, stop: threading.Event):
        while run.faults < times and not stop.wait(every):
            stack.stop_postgres()
            try:
                stopped = readyz_while_down(stack.base)
            finally:
                stack.start_postgres()
            run.readyz.append({"stopped": stopped, "back": readyz_until_ready(stack.base)})
            run.faults += 1

    return inject


def readyz(base: str) -> dict:
    """One answer of ``/readyz``: its status and what it names as down."""
    try:
        with urllib.request.urlopen(f"{base}/readyz", timeout=15) as answer:
            status, body = answer.status, answer.read()
    except urllib.error.HTTPError as error:
        status, body = error.code, error.read()
    except OSError as error:  # no answer at all
        return {"status": None, "down": [], "error": type(error).__name__}
    try:
        down = json.loads(body).get("down", [])
    except ValueError:
        down = ["(not JSON)"]
    return {"status": status, "down": down}


def readyz_while_down(base: str, tries: int = 3) -> dict:
    """``/readyz`` while PostgreSQL is stopped: asked again when no answer came in time (a
    load balancer counts that as not ready too, but the promise is a 503 naming what is
    down), at most ``tries`` times; the last answer, and how many were asked."""
    asked = 0
    while True:
        asked += 1
        began = time.monotonic()
        answer = readyz(base)
        if answer["status"] is not None or asked == tries:
            return {**answer, "asked": asked, "seconds": round(time.monotonic() - began, 2)}


def readyz_until_ready(base: str, seconds: float = 60) -> dict:
    """Ask ``/readyz`` until it answers 200 (or ``seconds`` pass); its last answer, and when."""
    began = time.monotonic()
    while True:
        answer = readyz(base)
        if answer["status"] == 200 or time.monotonic() - began > seconds:
            return {**answer, "after_s": round(time.monotonic() - began, 2)}
        time.sleep(0.2)


def readyz_followed_the_database(probes: list) -> dict:
    """Each stop of PostgreSQL: /readyz answered 503 naming ``database`` while it was down,
    and 200 once it was back."""
    wrong = [
        probe
        for probe in probes
        if probe["stopped"]["status"] != 503
        or "database" not in probe["stopped"]["down"]
        or probe["back"]["status"] != 200
    ]
    return {"violations": len(wrong), "checked": len(probes), "examples": wrong[:5]}


def flush_redis(every: float, times: int):
    def inject(stack: Stack, run: Run, tokens: dict, stop: threading.Event):
        while run.faults < times and not stop.wait(every):
            stack.flush_and_restart_redis()
            run.faults += 1

    return inject


def restart_receiver(times: int, down: float):
    """SIGKILL the webhook receiver ``times`` times, spaced by progress (the k-th when
    k/(times+1) of the tasks are done); each time it stays down ``down`` seconds."""

    def inject(stack: Stack, run: Run, tokens: dict, stop: threading.Event):
        for k in range(1, times + 1):
            while _done(stack.url) < run.tasks * k / (times + 1):
                if stop.wait(0.5):
                    return
            run.receiver.kill()
            time.sleep(down)  # deliveries fail meanwhile, and wait for their retries
            run.receiver.start()
            run.faults += 1

    return inject


# --- webhooks ------------------------------------------------------------------------------

# Quick retries (seconds, about 90 in all) and a sweep every 2 s, so that a receiver's
# outage is retried within the run; targets on 127.0.0.1 are allowed.
WEBHOOK_ENV = {
    "FACTORY_WEBHOOK_RETRY_SCHEDULE": ",".join(["1", "2", "3"] + ["5"] * 17),
    "FACTORY_WEBHOOK_SWEEP_SECONDS": "2",
    "FACTORY_WEBHOOK_ALLOW_PRIVATE": "1",
}


class Receiver:
    """A ``proof.receiver`` process on one port and one log, killed and started again at will."""

    def __init__(self, stack: Stack):
        self.stack = stack
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.log = stack.work / "received-webhooks.ndjson"
        self.secret = ""
        self.process: subprocess.Popen | None = None
        self.restarts = 0

    def start(self) -> None:
        if self.process is not None:
            self.restarts += 1
        for _ in range(20):  # the port may be briefly held after a kill: try again
            self.process = subprocess.Popen(
                [
                    *(sys.executable, "-m", "proof.receiver", "--port", str(self.port)),
                    *("--secret", self.secret, "--log", str(self.log)),
                ],
                cwd=ROOT,
                env=self.stack.env,
                stdout=open(self.stack.work / "receiver.out", "ab"),  # noqa: SIM115
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and self.process.poll() is None:
                with (
                    contextlib.suppress(OSError),
                    socket.create_connection(("127.0.0.1", self.port)),
                ):
                    return
                time.sleep(0.1)
            self.kill()
            time.sleep(0.5)
        raise RuntimeError(f"the webhook receiver does not start on port {self.port}")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def drain(self, url: str, seconds: float = 180) -> dict:
        """Wait (with the stack still up) until no delivery is pending: how long it took,
        and how many messages were still queued for the workers then."""
        if self.process is None or self.process.poll() is not None:
            self.start()
        began = time.monotonic()
        while time.monotonic() - began < seconds:
            with (
                contextlib.suppress(psycopg.OperationalError),
                psycopg.connect(url, connect_timeout=3) as conn,
            ):
                pending = conn.execute(
                    "SELECT count(*) FROM events_delivery WHERE status = 'pending'"
                ).fetchone()[0]
                if pending == 0:
                    break
            time.sleep(1)
        queued = subprocess.run(
            ["redis-cli", "-n", str(REDIS_DB), "llen", self.stack.queue],
            capture_output=True,
            text=True,
        ).stdout.strip()
        return {
            "seconds": round(time.monotonic() - began, 1),
            "broker_messages_left": int(queued) if queued.isdigit() else None,
        }


def _job_errors(work: Path) -> dict:
    """``"job: exception" → count`` of the jobs that raised, from the workers' logs."""
    found = Counter()
    for log in work.glob("worker*.log"):
        for line in log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError, AttributeError):
                line = json.loads(line).get("message", "")  # a JSON log line (docs/operations.md)
            name, raised, what = line.partition(" raised unexpected: ")
            if raised:
                job = name.rsplit("Task ", 1)[-1].split("[")[0]
                found[f"{job}: {what.split('(')[0]}"] += 1
    return dict(found)


def django_for_the_harness(env: dict) -> None:
    """Set Django up in this process with the stack's own settings, once.

    The harness asks the product which audit events have a type (``events.types``), and a
    gate run's type depends on what its gate declares: the gate registry imports the gates,
    which need Django's apps. Nothing here touches a database.
    """
    if settings.configured:
        return
    for name, value in env.items():
        os.environ.setdefault(name, value)
    django.setup()


def webhooks_received(url: str, subscription_id: int, log: Path) -> dict:
    """Every audit event with a type since the subscription was made owes one delivery,
    which is delivered and in the receiver's log (at least once): none unwritten, none lost."""
    with psycopg.connect(url) as conn:
        create_event, project_id = conn.execute(
            """
            SELECT e.id, s.project_id FROM tasks_event e
            JOIN django_content_type ct ON ct.id = e.content_type_id
            JOIN events_subscription s ON s.id = e.object_id
            WHERE ct.app_label = 'events' AND ct.model = 'subscription'
              AND e.object_id = %s AND e.transition = 'create'
            """,
            (subscription_id,),
        ).fetchone()
        events = conn.execute(
            """
            SELECT e.id, ct.app_label || '.' || ct.model, e.transition, e.to_state,
                   coalesce(g.gate, ''), extract(epoch FROM e.created_at)::float
            FROM tasks_event e JOIN django_content_type ct ON ct.id = e.content_type_id
            LEFT JOIN evidence_gaterun g
              ON ct.app_label = 'evidence' AND ct.model = 'gaterun' AND g.id = e.object_id
            WHERE e.project_id = %s AND e.id > %s
            """,
            (project_id, create_event),
        ).fetchall()
        deliveries = {
            event_id: (kind, status, tries)
            for event_id, kind, status, tries in conn.execute(
                "SELECT event_id, type, status, tries FROM events_delivery"
                " WHERE subscription_id = %s",
                (subscription_id,),
            )
        }
    wanted = {}  # event id → (type, created at)
    for event_id, label, transition, to_state, gate, created in events:
        kind = type_of(label, transition, to_state, gate)
        if kind is not None:
            wanted[event_id] = (kind, created)
    got, copies, unreadable = {}, Counter(), 0
    for line in log.read_text().splitlines() if log.exists() else []:
        try:
            fact = json.loads(line)
        except ValueError:
            unreadable += 1  # a line cut by a SIGKILL
            continue
        copies[fact["id"]] += 1
        got.setdefault(fact["id"], fact)
    found, latencies = [], []
    missing = Counter()  # why a wanted event was not received: its delivery's status
    for event_id, (kind, created) in sorted(wanted.items()):
        webhook_id = f"msg_{event_id}_{subscription_id}"
        delivery = deliveries.get(event_id)
        fact = got.get(webhook_id)
        if delivery is None:
            missing["unwritten" if fact is None else "received_unwritten"] += 1
            found.append(f"event {event_id} ({kind}) has no delivery")
        elif fact is None:
            missing[delivery[1]] += 1  # pending at the deadline, failed, or delivered unlogged
            found.append(f"{webhook_id} ({kind}) not received: {delivery[1]}, {delivery[2]} tries")
        elif delivery[0] != kind or delivery[1] != "delivered" or fact["event"] != event_id:
            found.append(f"{webhook_id} ({kind}): delivery {delivery}, received {fact}")
        if fact is not None:
            latencies.append(fact["at"] - created)
    owed = {f"msg_{event_id}_{subscription_id}" for event_id in wanted}
    found += [
        f"event {e}: a delivery of a {d[0]} not owed"
        for e, d in deliveries.items()
        if e not in wanted
    ]
    found += [f"{webhook_id} received, never owed" for webhook_id in got if webhook_id not in owed]
    latencies.sort()

    def pick(q: float) -> float | None:
        return (
            round(latencies[min(len(latencies) - 1, int(q * len(latencies)))], 3)
            if latencies
            else None
        )

    return {
        "events_wanted": len(wanted),
        "deliveries": len(deliveries),
        "received_unique": len(owed & set(got)),
        "received_total": sum(copies.values()),
        "duplicates": sum(n - 1 for n in copies.values()),
        "lost": sum(missing.values()),
        "not_received_by_status": dict(missing),
        "unreadable_lines": unreadable,
        "tries": sum(d[2] for d in deliveries.values()),
        "latency_p50_s": pick(0.50),
        "latency_p95_s": pick(0.95),
        "latency_max_s": round(latencies[-1], 3) if latencies else None,
        "types": dict(sorted(Counter(kind for kind, _ in wanted.values()).items())),
        "violations": len(found),
        "examples": found[:5],
    }


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
            tasks=50 if short else 300,  # short: ~15 kills in about a minute
            gates={"tests-pass": {}, "diff-scope": {}, "proof-sleep": {"seconds": 0.4}},
            env={"FACTORY_EXTRA_GATES": "proof-sleep=proof.gates.SleepGate"},
            kills_server=True,
        ),
        kill_workers(every=3 if short else 4),
    ),
    "restart-postgres": lambda short: (
        Run(
            "restart_postgres",
            agents=6 if short else 16,
            tasks=120 if short else 1000,
            kills_server=True,  # a commit whose answer was lost is counted by nobody
        ),
        restart_postgres(every=6 if short else 20, times=2 if short else 5),
    ),
    "flush-redis": lambda short: (
        Run("flush_redis", agents=6 if short else 16, tasks=120 if short else 1000),
        flush_redis(every=5 if short else 20, times=1 if short else 4),
    ),
    "webhooks": lambda short: (
        Run(
            "webhooks",
            agents=6 if short else 16,
            tasks=100 if short else 500,
            env=WEBHOOK_ENV,
            webhooks=True,
        ),
        restart_receiver(times=2 if short else 5, down=3),
    ),
    # The merge queue on a real repository (proof/landing.py): its own harness and faults.
    "landing": lambda short: (landing.scenario(short), None),
    # Issues to landed commits through pull requests on a protected GitHub (the stand-in).
    "code-host": lambda short: (code_host.scenario(short), None),
}
