"""Claims per second through the HTTP endpoint against a raw SKIP LOCKED loop, same database, same run.

    uv run python bench/claim.py [--seconds 10] [--workers 4] [--rounds-only] [--budget]

Raw: N threads, each with its own psycopg connection, run
``UPDATE … WHERE id = (SELECT … FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING id``.
Bare Django: the same UPDATE in a one-view Django site (bench/bare_site.py) under
gunicorn — the floor any Django endpoint starts from. Site middleware: the same UPDATE
in a plain view of the real site (bench/floor_urls.py), behind its middleware. DRF
floor: the same UPDATE in a DRF view of the real site, behind its middleware, token
authentication and throttles — the floor any endpoint of this API starts from. HTTP: ``wrk`` (a C load
generator that costs little CPU) posts to ``/api/v1/tasks/claim/`` with N
connections against gunicorn. Both at 1, 4 and 16
clients; prints JSON with claims/s and latency percentiles. Needs PostgreSQL and wrk.

The figure that decides is the real endpoint against its DRF floor at 16 clients. On a
noisy 2-core machine one run can say 0.56x and the next 0.34x, so the two are measured
in ``--rounds`` short rounds that alternate (floor, endpoint; then endpoint, floor; ...)
against one server, and the median ratio is reported with its spread: one noisy round
cannot decide. Target: median ratio >= 0.7, median p99 ratio <= 1.5. ``--budget`` adds a
third leg to each round, the endpoint in a project with a monthly budget (the claim then
also reads the month's spend), and its ratios to the same floor.

Its database is ``factory_bench_claim_<checkout directory>`` (``BENCH_DATABASE`` to name
another); on a Redis that others use, give it a database of its own with ``BENCH_CACHE_URL``.
"""

import argparse
import json
import re
import statistics
import subprocess
import tempfile
import threading
import time
from decimal import Decimal
from pathlib import Path

from common import drop_database, gunicorn, percentiles, setup_django

RAW_CLAIM = """
UPDATE tasks_task SET state = 'claimed', updated_at = now()
WHERE id = (
    SELECT id FROM tasks_task
    WHERE project_id = %s AND state = 'ready'
    ORDER BY priority DESC, created_at, id
    FOR UPDATE SKIP LOCKED LIMIT 1
)
RETURNING id
"""


def make_tasks(project, count: int) -> None:
    from tasks.models import Task

    Task.objects.bulk_create(
        [
            Task(
                project=project,
                number=i,
                key=f"{project.slug}-{i}",
                title=f"bench {i}",
                state="ready",
            )
            for i in range(1, count + 1)
        ],
        batch_size=5000,
    )


def new_project(slug: str, agent, tasks: int):
    from projects.services import membership_grant, project_create

    project = project_create(slug=slug, name=slug)
    membership_grant(user=agent, project=project, role="agent")
    make_tasks(project, tasks)
    return project


def raw_loop(url: str, project_id: int, clients: int, seconds: float) -> dict:
    import psycopg

    latencies: list[float] = []
    claimed = [0]
    lock = threading.Lock()
    stop = time.perf_counter() + seconds
    barrier = threading.Barrier(clients)

    def work():
        mine = []
        with psycopg.connect(url, autocommit=True) as conn:
            barrier.wait()
            while time.perf_counter() < stop:
                start = time.perf_counter()
                row = conn.execute(RAW_CLAIM, (project_id,)).fetchone()
                mine.append((time.perf_counter() - start) * 1000)
                if row is None:
                    break
        with lock:
            latencies.extend(mine)
            claimed[0] += len(mine)

    threads = [threading.Thread(target=work) for _ in range(clients)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    return {
        "claims": claimed[0],
        "claims_per_s": round(claimed[0] / elapsed, 1),
        **percentiles(latencies),
    }


WRK_SCRIPT = """
wrk.method = "POST"
wrk.headers["Authorization"] = "Bearer {token}"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{{"project": "{slug}", "lease_seconds": 3600}}'
"""


def to_ms(value: str) -> float:
    number, unit = re.match(r"([\d.]+)(\w+)", value).groups()
    return float(number) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


def http_loop(
    base: str,
    token: str,
    slug: str,
    clients: int,
    seconds: float,
    path: str = "/api/v1/tasks/claim/",
) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(WRK_SCRIPT.format(token=token, slug=slug))
    threads = min(clients, 2)
    run = subprocess.run(
        [
            "wrk",
            f"-t{threads}",
            f"-c{clients}",
            f"-d{int(seconds)}s",
            "--latency",
            "-s",
            script.name,
            f"{base}{path}",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    Path(script.name).unlink()
    out = run.stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    dist = dict(re.findall(r"^\s+(50|75|90|99)%\s+(\S+)", out, re.M))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {
        "claims_per_s": rate,
        "p50_ms": to_ms(dist["50"]),
        "p99_ms": to_ms(dist["99"]),
        "non_2xx": int(errors.group(1)) if errors else 0,
    }


def rounds(base: str, token: str, agent, args) -> dict:
    """The endpoint against its DRF floor at 16 clients, in alternating short rounds on one
    server, each on tasks of its own: the median ratio and its spread. With ``--budget``
    a third leg claims in a project with a monthly budget (far from spent), whose claim
    also reads the month's spend."""
    warm = new_project("RWARM", agent, 5000)
    http_loop(base, token, warm.slug, 16, 2)  # every worker prepares the claim statement
    out = []
    for n in range(args.rounds):
        legs = {
            "floor": (new_project(f"RF{n}", agent, 20_000), "/floor/claim/{slug}/"),
            "endpoint": (new_project(f"RE{n}", agent, 20_000), "/api/v1/tasks/claim/"),
        }
        if args.budget:
            project = new_project(f"RB{n}", agent, 20_000)
            project.budget_usd = Decimal("1000000")
            project.save(update_fields=["budget_usd"])
            legs["endpoint_with_budget"] = (project, "/api/v1/tasks/claim/")
        # Alternate the order, so a drift in the machine's speed favours no leg.
        order = list(legs) if n % 2 == 0 else list(reversed(legs))
        measured = {}
        for leg in order:
            project, path = legs[leg]
            measured[leg] = http_loop(
                base, token, project.slug, 16, args.round_seconds, path.format(slug=project.slug)
            )
        floor = measured["floor"]
        row = {
            **measured,
            "ratio": round(measured["endpoint"]["claims_per_s"] / floor["claims_per_s"], 3),
            "p99_ratio": round(measured["endpoint"]["p99_ms"] / floor["p99_ms"], 3),
        }
        if args.budget:
            budget = measured["endpoint_with_budget"]
            row["budget_ratio"] = round(budget["claims_per_s"] / floor["claims_per_s"], 3)
            row["budget_p99_ratio"] = round(budget["p99_ms"] / floor["p99_ms"], 3)
        out.append(row)
    summary = {}
    for key in ("ratio", "p99_ratio", "budget_ratio", "budget_p99_ratio"):
        if key in out[0]:
            values = sorted(r[key] for r in out)
            summary[f"median_{key}"] = round(statistics.median(values), 3)
            summary[f"{key}_spread"] = [values[0], values[-1]]
    for leg in ("floor", "endpoint", "endpoint_with_budget"):
        if leg in out[0]:
            summary[f"median_{leg}_claims_per_s"] = round(
                statistics.median(r[leg]["claims_per_s"] for r in out), 1
            )
    return {"rounds": out, "summary": summary}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--clients", default="1,4,16")
    parser.add_argument("--rounds", type=int, default=6, help="alternating floor/endpoint rounds")
    parser.add_argument("--round-seconds", type=float, default=5)
    parser.add_argument(
        "--rounds-only", action="store_true", help="skip the ladder: only the rounds at 16"
    )
    parser.add_argument(
        "--budget",
        action="store_true",
        help="a third leg in each round: the endpoint in a project with a monthly budget",
    )
    args = parser.parse_args()
    levels = [] if args.rounds_only else [int(c) for c in args.clients.split(",")]

    url = setup_django("claim")
    from django.contrib.auth import get_user_model
    from knox.models import AuthToken

    agent = get_user_model().objects.create_user("bench-agent", password="x")
    token = AuthToken.objects.create(user=agent, expiry=None)[1]
    per_phase = 40_000
    result = {
        "raw": {},
        "bare_django": {},
        "site_middleware": {},
        "drf_floor": {},
        "http": {},
        "config": vars(args) | {"tasks_per_phase": per_phase},
    }
    for clients in levels:
        project = new_project(f"R{clients}", agent, per_phase)
        result["raw"][clients] = raw_loop(url, project.pk, clients, args.seconds)
    with gunicorn(
        url,
        workers=args.workers,
        threads=args.threads,
        app="bare_site",
        extra_env={"DJANGO_SETTINGS_MODULE": "bare_site"},
    ) as (base, _):
        for clients in levels:
            project = new_project(f"B{clients}", agent, per_phase)
            result["bare_django"][clients] = http_loop(
                base, token, project.slug, clients, args.seconds, f"/claim/{project.slug}/"
            )
    with gunicorn(
        url,
        workers=args.workers,
        threads=args.threads,
        extra_env={"DJANGO_SETTINGS_MODULE": "floor_site"},
    ) as (base, _):
        for clients in levels:
            project = new_project(f"M{clients}", agent, per_phase)
            result["site_middleware"][clients] = http_loop(
                base,
                token,
                project.slug,
                clients,
                args.seconds,
                f"/middleware/claim/{project.slug}/",
            )
        for clients in levels:
            project = new_project(f"F{clients}", agent, per_phase)
            result["drf_floor"][clients] = http_loop(
                base, token, project.slug, clients, args.seconds, f"/floor/claim/{project.slug}/"
            )
        result["rounds_at_16"] = rounds(base, token, agent, args)
    with gunicorn(url, workers=args.workers, threads=args.threads) as (base, _):
        warm = new_project("WARM", agent, 2000)
        http_loop(base, token, warm.slug, 4, 2)
        for clients in levels:
            project = new_project(f"H{clients}", agent, per_phase)
            result["http"][clients] = http_loop(base, token, project.slug, clients, args.seconds)
    for phase in ("http", "bare_django", "site_middleware", "drf_floor"):
        result[f"ratio_{phase}_to_raw"] = {
            c: round(result[phase][c]["claims_per_s"] / result["raw"][c]["claims_per_s"], 3)
            for c in levels
        }
    summary = result["rounds_at_16"]["summary"]
    result["target"] = {"median_ratio_to_drf_floor": 0.7, "median_p99_ratio_to_drf_floor": 1.5}
    result["meets_target"] = summary["median_ratio"] >= 0.7 and summary["median_p99_ratio"] <= 1.5
    print(json.dumps(result, indent=2))
    drop_database("claim")


if __name__ == "__main__":
    main()
