"""The merge queue's throughput: the same approved changes landed one at a time and in batches.

    uv run python bench/landing.py [--suite-seconds 5] [--changes 32] [--quick]

One real bare origin repository is built in a temporary directory: ``main`` with the
runner demo's ``run_tests.py`` (``demo.repository.RUN_TESTS``, which writes
``reports/junit.xml``) and one test that sleeps ``--suite-seconds`` (a sleep, not work:
the suite's length does not depend on how busy the machine is), then ``--changes``
independent changes, each on its own branch off ``main`` adding a module and its test.

For ``batch_max`` 1 (one change per verify run, as Gas Town's Refinery lands), 4 and 8,
a fresh project on a fresh copy of the origin (a local repository serves one project)
queues every change through the real services (submitted with no gates, then approved
under the policy with the runner, as tests/landing/conftest.py does), with landing
``{"mode": "push"}`` on. The
approvals' own land jobs run in this thread and find the lander lock held by the bench
(``landing.locks.lander_lock``), so nothing lands while the queue fills; then
``landing.lander.land`` works the whole queue and is timed: wall time, landed changes
per minute, verify runs (``landing.models.Batch.verify_runs`` summed) next to the limits
no queue can beat with this suite: ``ceil(changes / batch_max)`` runs of the suite
(``changes`` runs one at a time). The suite's time is measured first, in the sandbox, on
``main`` (three runs of ``runner.verify.verify_tree``, the median). Target: batch 8 at
least 4 times as fast as batch 1.

Then the same with one culprit among the changes, batch 8: a change whose own test is a
snapshot of the repository's modules taken at its own commit, so it passes there and
fails once merged with any other change. Its extra verify runs over the clean batch-8 run
are counted, and the runs of the batch that found it are set beside
``landing.verifying.bisect_bound(8)`` (2·(log2(8)+2)+1 = 11: each failing tree is run twice,
the culprit's a third time).

Then approval-to-landed p50/p95 with one culprit per 8 changes (16 changes, batch 8), with
1 and with 4 verify runs at once (``FACTORY_LANDING_VERIFY_PARALLEL``: the prefixes a
bisection may need next verified beside the one it needs now), side by side
(``--parallel-only`` runs this part alone).

Needs bubblewrap (the runner's sandbox); the database is a temporary SQLite file.
``--quick`` is a 1 s suite and 8 changes. Prints JSON.
"""

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from landing_setup import (
    Origin,
    environment,
    measure_suite,
    new_project,
    queue_approved,
    verify_block,
)

BATCHES = (1, 4, 8)
TARGET_SPEEDUP = 4.0

# The culprit's module and its snapshot test, right at its own commit only.
INVENTORY = """\
from pathlib import Path


def modules():
    return sorted(path.stem for path in Path(__file__).resolve().parent.glob("*.py"))
"""

INVENTORY_TEST = """\
import unittest

from {name} import modules


class InventoryTest(unittest.TestCase):
    def test_modules(self):
        self.assertEqual(modules(), ["{name}", "run_tests"])
"""
# Culprits of the parallel runs, one per 8 changes: each is the inventory under its own name.
CULPRITS = ("inventory", "census", "roster", "tally")
PARALLEL = (1, 4)


def run(origin: Origin, verify: dict, *, slug: str, batch_max: int, names: list[str]) -> dict:
    """Queue ``names`` (approved, in this order) on a fresh project and land them all."""
    from landing.lander import land
    from landing.models import Batch
    from projects import services as project_services
    from tasks.models import Task

    origin = origin.copy(slug.lower())
    flow = new_project(slug, origin.url, verify)
    project_services.project_update(
        project=flow.project,
        actor=flow.manager,
        landing={"mode": "push", "method": "squash", "batch_max": batch_max},
    )
    flow.project.refresh_from_db()
    started = time.perf_counter()
    tasks = queue_approved(flow, origin.commits, names)
    queued = time.perf_counter() - started

    started = time.perf_counter()
    counts = land(flow.project)
    wall = time.perf_counter() - started

    batches = list(Batch.objects.filter(project=flow.project).order_by("pk"))
    tasks = {name: Task.objects.get(pk=task.pk) for name, task in tasks.items()}
    return {
        "batch_max": batch_max,
        "changes": len(names),
        "queue_seconds": round(queued, 3),
        "wall_seconds": round(wall, 3),
        "landed": counts["landed"],
        "returned": counts["returned"],
        "landed_per_minute": round(counts["landed"] / wall * 60, 2),
        "batches": len(batches),
        "verify_runs": sum(b.verify_runs for b in batches),
        "bisect_steps": sum(b.bisect_steps for b in batches),
        "pushes": sum(b.pushes for b in batches),
        "commits_on_main": len(origin.landed()),
        "_batches": batches,
        "_states": {name: task.state for name, task in tasks.items()},
        "_attempts": {name: task.attempts.order_by("-pk").first() for name, task in tasks.items()},
    }


def parallel_runs(origin: Origin, verify: dict, names: list[str]) -> dict:
    """Approval to landed with one culprit per 8 changes, batch 8, with 1 and 4 verify runs
    at once (``FACTORY_LANDING_VERIFY_PARALLEL``): p50 and p95 over the landed changes (every
    change is approved before the lander starts, so each wait counts from its approval)."""
    from django.test import override_settings

    from projects.models import Event

    with_culprits = list(names)
    for index, culprit in enumerate(CULPRITS[: len(names) // 8]):
        with_culprits[8 * index + 3] = culprit
    figures = {}
    for workers in PARALLEL:
        with override_settings(FACTORY_LANDING_VERIFY_PARALLEL=workers):
            result = run(origin, verify, slug=f"PAR{workers}", batch_max=8, names=with_culprits)
        waits = []
        for attempt in result["_attempts"].values():
            landed = Event.objects.filter(task=attempt.task, transition="land").first()
            if landed is not None:
                waits.append((landed.created_at - attempt.queued_at).total_seconds())
        waits.sort()
        figures[workers] = public(result) | {
            "culprits": len(names) // 8,
            "speculative_unused": sum(b.speculative_unused for b in result["_batches"]),
            "approval_to_landed_p50_s": round(statistics.median(waits), 2) if waits else None,
            "approval_to_landed_p95_s": round(waits[max(0, math.ceil(0.95 * len(waits)) - 1)], 2)
            if waits
            else None,
        }
        sys.stderr.write(f"parallel {workers}: {json.dumps(figures[workers])}\n")
    return figures


def public(result: dict) -> dict:
    return {k: v for k, v in result.items() if not k.startswith("_")}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite-seconds", type=float, help="the suite's length (5; --quick 1)")
    parser.add_argument("--changes", type=int, help="approved changes to land (32; --quick 8)")
    parser.add_argument(
        "--culprit-at", type=int, help="the culprit's place in the queue, from 0 (min(12, n/2))"
    )
    parser.add_argument("--quick", action="store_true", help="a 1 s suite and 8 changes")
    parser.add_argument(
        "--parallel-only",
        action="store_true",
        help="only approval to landed with one culprit per 8 changes, 1 vs 4 verify runs at once",
    )
    args = parser.parse_args()
    defaults = (1.0, 8) if args.quick else (5.0, 32)
    args.suite_seconds = args.suite_seconds or defaults[0]
    args.changes = args.changes or defaults[1]
    if args.culprit_at is None:
        args.culprit_at = min(12, args.changes // 2)

    work = Path(tempfile.mkdtemp(prefix="factory-bench-landing-"))
    environment(work)
    from django.conf import settings

    from landing.verifying import bisect_bound

    verify = verify_block(args.suite_seconds)
    names = [f"change{n:02d}" for n in range(args.changes)]
    try:
        origin = Origin(
            work,
            suite_seconds=args.suite_seconds,
            names=names,
            extra={
                culprit: {
                    f"{culprit}.py": INVENTORY,
                    f"tests/test_{culprit}.py": INVENTORY_TEST.format(name=culprit),
                }
                for culprit in CULPRITS
            },
        )
        suite = measure_suite(origin, verify)
        parallel = parallel_runs(origin, verify, names[: max(8, min(16, len(names)))])
        if args.parallel_only:
            print(json.dumps({"suite": suite, "parallel": parallel, "cpus": os.cpu_count()}))
            return
        runs = {}
        for batch_max in BATCHES:
            runs[batch_max] = run(
                origin, verify, slug=f"B{batch_max}", batch_max=batch_max, names=names
            )
            sys.stderr.write(f"batch_max {batch_max}: {json.dumps(public(runs[batch_max]))}\n")
        with_culprit = list(names)
        with_culprit[args.culprit_at] = "inventory"
        culprit_run = run(origin, verify, slug="CUL", batch_max=8, names=with_culprit)
        sys.stderr.write(f"culprit: {json.dumps(public(culprit_run))}\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)

    seconds = suite["suite_seconds"]
    problems = []
    configurations = []
    for batch_max, result in runs.items():
        limit = seconds * math.ceil(args.changes / batch_max)
        if result["landed"] != args.changes or result["commits_on_main"] != args.changes:
            problems.append({"batch_max": batch_max, "landed": result["landed"]})
        configurations.append(
            public(result)
            | {
                "limit_verify_runs": math.ceil(args.changes / batch_max),
                "limit_seconds": round(limit, 3),
                "wall_over_limit": round(result["wall_seconds"] / limit, 3),
                "seconds_per_verify_run": round(result["wall_seconds"] / result["verify_runs"], 3),
            }
        )
    speedup = round(runs[1]["wall_seconds"] / runs[8]["wall_seconds"], 2)

    # The batch that met the culprit: its runs against the bound, and what it said.
    found = next(
        (b for b in culprit_run["_batches"] if any(c["outcome"] == "failed" for c in b.changes)),
        None,
    )
    attempt = culprit_run["_attempts"]["inventory"]
    culprit_ok = (
        culprit_run["_states"]["inventory"] == "ready"
        and attempt.landing.get("state") == "failed"
        and culprit_run["landed"] == args.changes - 1
        and all(s == "done" for n, s in culprit_run["_states"].items() if n != "inventory")
    )
    if not culprit_ok:
        problems.append({"culprit": culprit_run["_states"], "landing": attempt.landing})
    extra = culprit_run["verify_runs"] - runs[8]["verify_runs"]
    culprit = public(culprit_run) | {
        "culprit_at": args.culprit_at,
        "culprit_test": "a snapshot of the repository's modules: passes at its own commit, "
        "fails once merged with any other change",
        "culprit_returned_as": attempt.landing.get("state"),
        "culprit_failing": attempt.landing.get("failing"),
        "culprit_reason": attempt.landing.get("reason", "")[:300],
        "extra_verify_runs": extra,
        "extra_batches": culprit_run["batches"] - runs[8]["batches"],
        "finding_batch": {
            "changes": len(found.changes),
            "verify_runs": found.verify_runs,
            "bisect_steps": found.bisect_steps,
        }
        if found
        else None,
        "bisect_bound": bisect_bound(8),
        "met": found is not None and found.verify_runs <= bisect_bound(8),
    }
    result = {
        "suite": suite,
        "serial_limit_seconds": round(args.changes * seconds, 3),
        "configurations": configurations,
        "speedup_batch8_over_batch1": speedup,
        "target_speedup": TARGET_SPEEDUP,
        "culprit": culprit,
        "parallel_verification": parallel,
        "all_landed": not problems,
        "problems": problems,
        "machine": {
            "cpus": os.cpu_count(),
            "python": subprocess.run(
                ["python3", "--version"], capture_output=True, text=True, check=True
            ).stdout.strip(),
            "sandbox": settings.FACTORY_RUNNER_SANDBOX,
            "as_root": os.geteuid() == 0,
            "database": "sqlite",
        },
        "config": vars(args),
    }
    result["meets_target"] = speedup >= TARGET_SPEEDUP and culprit["met"] and not problems
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
