"""Submit → in-review latency and submissions per second through real Celery workers.

    uv run python bench/gates.py [--submissions 100]

Each submission carries small real artifacts (a JUnit report and a Cobertura report
from a pytest run, a git diff, a screenshot) and is checked by the built-in gates
(required-evidence, tests-pass, coverage, diff-scope, spec-current). Latency is
measured from the submit event to the gates_passed event, first one submission at
a time (the pipeline's own latency), then as a burst (throughput), with one and
with two worker processes. Needs PostgreSQL and Redis; prints JSON.
"""

import argparse
import json
import os
import subprocess
import time
import uuid
from pathlib import Path

from common import drop_database, percentiles, setup_django

from proof.workers import celery_worker

REDIS = os.environ.get("BENCH_REDIS", "redis://127.0.0.1:6379/14")
QUEUE = f"fm-bench-{uuid.uuid4().hex[:8]}"
# This process submits, so it sends its jobs to Redis like the web processes would.
os.environ.update(CELERY_BROKER_URL=REDIS, CELERY_TASK_ALWAYS_EAGER="0", CELERY_QUEUE=QUEUE)
POLICY = {
    "required-evidence": {},
    "tests-pass": {},
    "coverage": {"threshold": 0.5},
    "diff-scope": {},
    "spec-current": {},
}


def start_workers(url: str, count: int, queue: str, media: str) -> list[subprocess.Popen]:
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "DATABASE_CONN_MAX_AGE": "600",
        "CELERY_BROKER_URL": REDIS,
        "CELERY_TASK_ALWAYS_EAGER": "0",
        "CELERY_QUEUE": queue,
        "MEDIA_ROOT": media,
        "DJANGO_SETTINGS_MODULE": "factory_site.settings",
        "LOG_LEVEL": "WARNING",
    }
    workers = [celery_worker(env=env, queue=queue, name=f"bench{i}@%h") for i in range(count)]
    time.sleep(4)  # workers connect to Redis
    return workers


def stop(workers):
    for worker in workers:
        worker.terminate()
    for worker in workers:
        worker.wait(timeout=60)


def prepare(demo, count: int, label: str):
    """Claimed attempts with their evidence attached, ready to submit."""
    from django.core.files.base import ContentFile

    from demo import artifacts
    from evidence.services import evidence_attach
    from tasks import attempts as task_attempts
    from tasks import services

    attempts = []
    for i in range(count):
        services.task_publish(
            task=services.task_create(
                project=demo.project,
                actor=demo.manager,
                title=f"{label} {i}",
                spec=demo.spec,
                labels=[label],
                allowed_paths=["tasks/**", "tests/**"],
            ),
            actor=demo.manager,
        )
        attempt = task_attempts.task_claim(agent=demo.agent, labels=[label], lease_seconds=3600)
        for content, kind, name, criteria in (
            (demo.run.junit, "junit", "junit.xml", ["AC-1"]),
            (demo.run.coverage, "coverage", "coverage.xml", []),
            (demo.diff, "diff", "change.diff", []),
            (artifacts.screenshot(), "screenshot", "queue.png", ["AC-2"]),
        ):
            evidence_attach(
                attempt=attempt,
                actor=demo.agent,
                file=ContentFile(content, name=name),
                kind=kind,
                criteria=criteria,
            )
        attempts.append(attempt)
    return attempts


def latency_ms(attempt) -> float | None:
    from projects.models import Event

    events = {
        e.transition: e.created_at
        for e in Event.objects.filter(
            object_key=str(attempt), transition__in=["submit", "gates_passed", "gates_failed"]
        )
    }
    end = events.get("gates_passed") or events.get("gates_failed")
    return (end - events["submit"]).total_seconds() * 1000 if end else None


def wait_done(attempts, timeout: float) -> None:
    from tasks.models import Attempt

    ids = [a.pk for a in attempts]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not Attempt.objects.filter(pk__in=ids, state="checking").exists():
            return
        time.sleep(0.05)
    raise SystemExit(f"gates did not finish within {timeout} s")


def submit(attempt):
    from tasks import attempts as task_attempts

    task_attempts.attempt_submit(
        attempt=attempt,
        actor=attempt.agent,
        summary="bench",
        change={},
        idempotency_key=str(uuid.uuid4()),
    )


def measure(demo, workers: int, count: int, url: str, media: str) -> dict:
    from tasks.models import Attempt

    processes = start_workers(url, workers, QUEUE, media)
    try:
        serial = prepare(demo, count, f"s{workers}")
        for attempt in serial:  # one at a time: the pipeline's own latency
            submit(attempt)
            wait_done([attempt], 60)
        burst = prepare(demo, count, f"b{workers}")
        began = time.perf_counter()
        for attempt in burst:
            submit(attempt)
        wait_done(burst, 600)
        elapsed = time.perf_counter() - began
    finally:
        stop(processes)
    states = list(
        Attempt.objects.filter(pk__in=[a.pk for a in serial + burst]).values_list(
            "state", flat=True
        )
    )
    return {
        "workers": workers,
        "serial": percentiles([latency_ms(a) for a in serial]),
        "burst": {
            "submissions": count,
            "seconds": round(elapsed, 2),
            "per_second": round(count / elapsed, 1),
            **percentiles([latency_ms(a) for a in burst]),
        },
        "passed": states.count("passed"),
        "not_passed": len(states) - states.count("passed"),
    }


class Demo:
    pass


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--submissions", type=int, default=100)
    args = parser.parse_args()
    url = setup_django("gates")
    media = str(
        Path(os.environ.get("TMPDIR", "/tmp")) / f"factory-bench-media-{uuid.uuid4().hex[:6]}"
    )
    from django.conf import settings

    settings.MEDIA_ROOT = media

    from decisions import services as decisions
    from demo import artifacts
    from demo.seed import CLAIM_QUEUE_AFTER, CLAIM_QUEUE_BEFORE
    from projects import services as project_services
    from tests.factories import CRITERIA, UserFactory

    demo = Demo()
    demo.project = project_services.project_create(
        slug="GB", name="gates bench", gate_policy=POLICY
    )
    demo.manager, demo.agent = UserFactory(username="m"), UserFactory(username="a")
    project_services.membership_grant(user=demo.manager, project=demo.project, role="manager")
    project_services.membership_grant(user=demo.agent, project=demo.project, role="agent")
    criteria = [
        {**CRITERIA[0], "proof": {"check": "tests", "select": "tests/test_claim_demo.py::*"}},
        *CRITERIA[1:],
    ]
    demo.spec = decisions.spec_create(
        project=demo.project, actor=demo.manager, title="s", body="b", criteria=criteria
    )
    decisions.spec_version_accept(version=demo.spec.versions.get(), actor=demo.manager)
    demo.run = artifacts.run_suite(broken=False)
    demo.diff = artifacts.git_diff(CLAIM_QUEUE_BEFORE, CLAIM_QUEUE_AFTER)

    result = {
        "policy": sorted(POLICY),
        "runs": [measure(demo, w, args.submissions, url, media) for w in (1, 2)],
    }
    result["target"] = {"serial_p95_ms": 2000}
    result["meets_target"] = all(run["serial"]["p95_ms"] <= 2000 for run in result["runs"])
    print(json.dumps(result, indent=2))
    drop_database("gates")


if __name__ == "__main__":
    main()
