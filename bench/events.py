"""Events out, timed: audit event → webhook received, and the live stream's fan-out.

    uv run python bench/events.py [--tasks 200] [--clients 200] [--events 20]

(a) Webhooks. One Celery worker (and beat, as production runs it) on Redis and
PostgreSQL delivers to a ``proof.receiver`` process subscribed to ``task.published``.
``--tasks`` tasks are published through the services one at a time (the next once the
last was received), then as many again in a burst. Latency is the receiver's arrival
time minus the audit Event's ``created_at``. Target: p95 ≤ 1 s one at a time.

(b) The live stream. The ASGI app runs under uvicorn (one process); ``--clients``
clients hold ``GET /api/v1/events/stream`` open with a member's bearer token; then
``--events`` tasks are published, a quarter of a second apart. Latency is each
client's arrival time of each event minus its ``created_at``. Target: p95 ≤ 1 s. The
uvicorn process's RSS (``VmRSS``) is read with no client connected (after one warm-up
stream) and again with all of them connected and idle: the growth per connection.

Its own database (``factory_bench_events_<checkout>``) and Redis database 11 (``BENCH_EVENTS_REDIS``);
needs PostgreSQL and Redis. Prints JSON.
"""

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import ROOT, drop_database, free_port, percentiles, setup_django

from proof.workers import celery_worker

REDIS = os.environ.get("BENCH_EVENTS_REDIS", "redis://127.0.0.1:6379/11")
QUEUE = f"fm-bench-events-{uuid.uuid4().hex[:8]}"
TARGET_P95_MS = 1000
# This process publishes, so it sends its jobs to Redis as the web processes would;
# the receiver listens on 127.0.0.1, which a webhook may reach only when allowed.
os.environ.update(
    CELERY_BROKER_URL=REDIS,
    CELERY_TASK_ALWAYS_EAGER="0",
    CELERY_QUEUE=QUEUE,
    FACTORY_WEBHOOK_ALLOW_PRIVATE="1",
    LOG_LEVEL="WARNING",
)


def wait_for_port(port: int, process: subprocess.Popen, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and process.poll() is None:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
            return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


def spawn(command: list[str], env: dict, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop(*processes: subprocess.Popen) -> None:
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


def site_env(url: str, work: Path) -> dict:
    return {
        **os.environ,
        "DATABASE_URL": url,
        "DATABASE_CONN_MAX_AGE": "600",
        "DJANGO_SETTINGS_MODULE": "factory_site.settings",
        "STATIC_ROOT": str(work / "static"),
        "MEDIA_ROOT": str(work / "media"),
        "SECURE_COOKIES": "0",
        "PYTHONPATH": str(ROOT),
    }


def make_project():
    """A project with a manager (who publishes) and a reviewer (who watches the stream)."""
    from django.contrib.auth import get_user_model
    from knox.models import AuthToken

    from projects import services as project_services

    User = get_user_model()
    project = project_services.project_create(slug="EV", name="events bench", gate_policy={})
    manager = User.objects.create_user("ev-manager")
    member = User.objects.create_user("ev-reviewer")
    project_services.membership_grant(user=manager, project=project, role="manager")
    project_services.membership_grant(user=member, project=project, role="reviewer")
    return project, manager, AuthToken.objects.create(user=member, expiry=None)[1]


def publish(project, manager, title: str) -> tuple[int, float]:
    """Publish a new task; ``(its publish event's id, created_at as a Unix time)``."""
    from projects.models import Event
    from tasks import services

    task = services.task_create(project=project, actor=manager, title=title)
    services.task_publish(task=task, actor=manager)
    event = Event.objects.filter(task=task, transition="publish").get()
    return event.pk, event.created_at.timestamp()


def received(log: Path) -> dict[int, float]:
    """Event id → first arrival time, from the receiver's log."""
    first = {}
    for line in log.read_text().splitlines() if log.exists() else []:
        fact = json.loads(line)
        first.setdefault(fact["event"], fact["at"])
    return first


def wait_received(log: Path, event_ids, seconds: float) -> dict[int, float]:
    deadline = time.monotonic() + seconds
    while True:
        got = received(log)
        if all(e in got for e in event_ids) or time.monotonic() > deadline:
            return got
        time.sleep(0.005)


def webhook_latency(url: str, work: Path, project, manager, count: int) -> dict:
    from events import services as events_services

    port = free_port()
    log = work / "received.jsonl"
    subscription = events_services.subscription_create(
        project=project, actor=manager, url=f"http://127.0.0.1:{port}/hook", types=["task.*"]
    )
    env = {**site_env(url, work), "FACTORY_WEBHOOK_SWEEP_SECONDS": "10"}
    receiver = spawn(
        [
            *(sys.executable, "-m", "proof.receiver", "--port", str(port)),
            *("--secret", subscription.secret, "--log", str(log)),
        ],
        env,
        work / "receiver.out",
    )
    worker = celery_worker(env=env, queue=QUEUE, name=f"bench-events-{QUEUE[-8:]}@%h")
    beat = spawn(
        [
            *(sys.executable, "-m", "celery", "-A", "factory_site", "beat"),
            *("--loglevel", "WARNING", "--schedule", str(work / "beat-schedule")),
        ],
        env,
        work / "beat.log",
    )
    try:
        wait_for_port(port, receiver)
        warm, _ = publish(project, manager, "warm-up")  # also waits for the worker to start
        if warm not in wait_received(log, [warm], 60):
            raise RuntimeError("the worker delivered nothing within 60 s")
        one_by_one = []
        for n in range(count):
            event_id, created = publish(project, manager, f"one {n}")
            at = wait_received(log, [event_id], 30).get(event_id)
            one_by_one.append((event_id, created, at))
        started = time.time()
        burst = [publish(project, manager, f"burst {n}") for n in range(count)]
        published = time.time() - started
        got = wait_received(log, [e for e, _ in burst], 120)
        drained = max((got[e] for e, _ in burst if e in got), default=time.time()) - started
    finally:
        stop(worker, beat, receiver)
        events_services.subscription_update(subscription=subscription, actor=manager, active=False)
    lines = log.read_text().splitlines()
    return {
        "one_at_a_time": {
            "events": count,
            "received": sum(at is not None for _, _, at in one_by_one),
            **percentiles([(at - created) * 1000 for _, created, at in one_by_one if at]),
            "target_p95_ms": TARGET_P95_MS,
        },
        "burst": {
            "events": count,
            "received": sum(e in got for e, _ in burst),
            "published_in_s": round(published, 3),
            "all_received_in_s": round(drained, 3),
            "deliveries_per_s": round(count / drained, 1) if drained > 0 else None,
            **percentiles([(got[e] - created) * 1000 for e, created in burst if e in got]),
        },
        "receiver_lines": len(lines),
        "duplicates": len(lines) - len({json.loads(line)["id"] for line in lines}),
    }


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


class StreamClient:
    """One SSE connection: when each event id arrived."""

    def __init__(self):
        self.connected = asyncio.Event()
        self.arrivals: dict[int, float] = {}

    async def run(self, http, base: str, token: str, ready: asyncio.Event | None = None):
        headers = {"Authorization": f"Bearer {token}"}
        async with http.stream(
            "GET", f"{base}/api/v1/events/stream?project=EV", headers=headers
        ) as response:
            if response.status_code != 200:
                raise RuntimeError(f"stream answered {response.status_code}")
            async for line in response.aiter_lines():
                if line.startswith(": connected"):
                    self.connected.set()
                elif line.startswith("id: "):
                    self.arrivals.setdefault(int(line[4:]), time.time())


async def stream_fanout(
    url: str, work: Path, project, manager, token: str, clients: int, events: int
) -> dict:
    import httpx

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = spawn(
        [
            *(sys.executable, "-m", "uvicorn", "factory_site.asgi:application"),
            *("--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"),
            *("--no-access-log", "--backlog", "2048"),
        ],
        {**site_env(url, work), "FACTORY_SINGLE_PROCESS": "1"},
        work / "uvicorn.log",
    )
    publisher = ThreadPoolExecutor(1)  # the ORM is synchronous: one thread, one connection
    loop = asyncio.get_running_loop()
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    timeout = httpx.Timeout(30, read=None)
    try:
        wait_for_port(port, server)
        async with httpx.AsyncClient(limits=limits, timeout=timeout) as http:
            # One stream first, so the server's imports and its listener are not counted.
            warm = StreamClient()
            task = asyncio.create_task(warm.run(http, base, token))
            await asyncio.wait_for(warm.connected.wait(), 30)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await asyncio.sleep(2)
            before = rss_kb(server.pid)
            streams = [StreamClient() for _ in range(clients)]
            tasks = [asyncio.create_task(s.run(http, base, token)) for s in streams]
            started = time.monotonic()
            await asyncio.wait_for(asyncio.gather(*(s.connected.wait() for s in streams)), 120)
            connect_seconds = time.monotonic() - started
            await asyncio.sleep(2)  # idle
            after = rss_kb(server.pid)
            produced = []
            for n in range(events):
                produced.append(
                    await loop.run_in_executor(publisher, publish, project, manager, f"live {n}")
                )
                await asyncio.sleep(0.25)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not all(
                e in s.arrivals for s in streams for e, _ in produced
            ):
                await asyncio.sleep(0.05)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await loop.run_in_executor(publisher, _close_connections)
        publisher.shutdown()
        stop(server)
    samples = [
        (s.arrivals[e] - created) * 1000
        for s in streams
        for e, created in produced
        if e in s.arrivals
    ]
    last_client = [
        (max(s.arrivals[e] for s in streams) - created) * 1000
        for e, created in produced
        if all(e in s.arrivals for s in streams)
    ]
    return {
        "clients": clients,
        "events": events,
        "connected_in_s": round(connect_seconds, 2),
        "deliveries_expected": clients * events,
        "deliveries_received": len(samples),
        **percentiles(samples),
        "last_client_per_event": percentiles(last_client),
        "target_p95_ms": TARGET_P95_MS,
        "rss_kb_before": before,
        "rss_kb_connected": after,
        "rss_kb_per_connection": round((after - before) / clients, 1),
    }


def _close_connections() -> None:
    from django.db import connections

    connections.close_all()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=200, help="webhook events, each way")
    parser.add_argument("--clients", type=int, default=200, help="live stream clients")
    parser.add_argument("--events", type=int, default=20, help="events to the stream")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="factory-bench-events-"))
    url = setup_django("events")
    try:
        project, manager, token = make_project()
        webhooks = webhook_latency(url, work, project, manager, args.tasks)
        stream = asyncio.run(
            stream_fanout(url, work, project, manager, token, args.clients, args.events)
        )
    finally:
        drop_database("events")
        shutil.rmtree(work, ignore_errors=True)
        import redis

        redis.Redis.from_url(REDIS).delete(QUEUE)
    result = {
        "webhooks": webhooks,
        "stream": stream,
        "machine": {"cpus": os.cpu_count()},
        "config": {**vars(args), "redis": REDIS},
    }
    result["meets_target"] = (
        webhooks["one_at_a_time"]["p95_ms"] is not None
        and webhooks["one_at_a_time"]["p95_ms"] <= TARGET_P95_MS
        and stream["p95_ms"] is not None
        and stream["p95_ms"] <= TARGET_P95_MS
        and stream["deliveries_received"] == stream["deliveries_expected"]
    )
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
