"""Shared set-up for the benchmarks: a fresh PostgreSQL database, Django, gunicorn.

Benchmarks are scripts, not tests: they print JSON and never assert on timings.
Each one creates its own database (``factory_bench_<name>_<checkout>``, the checkout's
directory name, or ``BENCH_DATABASE`` when set) so it never touches development or test
data, nor another checkout's run of the same bench on a shared server, and drops it
afterwards.
"""

import contextlib
import os
import re
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PG = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
# Several gunicorn workers count rate limits in Redis, as in production (docs/deploy.md).
# On a shared Redis give each checkout a database of its own (BENCH_CACHE_URL).
CACHE_URL = os.environ.get("BENCH_CACHE_URL", "redis://127.0.0.1:6379/13")


def database_name(name: str) -> str:
    """``BENCH_DATABASE``, else ``factory_bench_<name>_<checkout directory>``: two checkouts
    running the same bench on one PostgreSQL never drop each other's database."""
    checkout = re.sub(r"[^a-z0-9_]", "_", ROOT.name.lower())
    return os.environ.get("BENCH_DATABASE") or f"factory_bench_{name}_{checkout}"[:63]


# The production profile (DEBUG off) needs a key; the benchmark process itself is one process,
# and its servers speak plain HTTP on 127.0.0.1. Celery workers it starts inherit all three.
os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
os.environ.setdefault("FACTORY_SINGLE_PROCESS", "1")
os.environ.setdefault("SECURE_SSL_REDIRECT", "0")

# The whole of a claim, as bench/bare_site.py and bench/floor_urls.py run it: one UPDATE.
BARE_CLAIM = """
UPDATE tasks_task SET state = 'claimed', updated_at = now()
WHERE id = (
    SELECT id FROM tasks_task
    WHERE project_id = (SELECT id FROM tasks_project WHERE slug = %s) AND state = 'ready'
    ORDER BY priority DESC, created_at, id
    FOR UPDATE SKIP LOCKED LIMIT 1
)
RETURNING id, key
"""


def setup_django(name: str) -> str:
    """Create a fresh database for this benchmark, point Django at it, migrate. Returns its URL."""
    import psycopg

    database = database_name(name)
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{database}"')
    url = f"{PG}/{database}"
    os.environ["DATABASE_URL"] = url
    os.environ["DATABASE_CONN_MAX_AGE"] = "600"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "factory_site.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return url


def drop_database(name: str) -> None:
    import psycopg
    from django.db import connections

    connections.close_all()
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{database_name(name)}" WITH (FORCE)')


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def gunicorn(
    url: str,
    *,
    workers: int = 4,
    threads: int = 1,
    app: str = "factory_site.wsgi",
    extra_env: dict | None = None,
    extra_args: list[str] | None = None,
):
    """Run ``app`` under gunicorn against the database ``url``; yield its base URL and process."""
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "DATABASE_CONN_MAX_AGE": "600",
        "DJANGO_SETTINGS_MODULE": "factory_site.settings",
        "LOG_LEVEL": "WARNING",
        # One bench user makes far more calls than an agent would: no rate limit here.
        "FACTORY_RATE_USER": "10000000/min",
        "FACTORY_RATE_ANON": "10000000/min",
        "STATIC_ROOT": tempfile.mkdtemp(prefix="factory-bench-static-"),
        "SECURE_COOKIES": "0",
        # One worker may count in its own memory; more share their counts in Redis.
        **({"CACHE_URL": CACHE_URL} if workers > 1 else {"FACTORY_SINGLE_PROCESS": "1"}),
        **(extra_env or {}),
    }
    command = [
        sys.executable,
        "-m",
        "gunicorn",
        app,
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        str(workers),
        "--threads",
        str(threads),
        "--log-level",
        "warning",
        "--backlog",
        "2048",
        *(extra_args or []),
    ]
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "bench")])
    process = subprocess.Popen(command, cwd=ROOT, env=env)
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", port), timeout=0.2),
            ):
                break
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}", process
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


def percentiles(samples_ms: list[float]) -> dict:
    if not samples_ms:
        return {"p50_ms": None, "p95_ms": None, "p99_ms": None}
    ordered = sorted(samples_ms)

    def pick(q):
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)

    return {
        "p50_ms": pick(0.50),
        "p95_ms": pick(0.95),
        "p99_ms": pick(0.99),
        "mean_ms": round(statistics.fmean(ordered), 3),
    }


def team_project(slug: str, *, spec_body: str):
    """A project with a manager, an agent and a reviewer, and one accepted spec.

    Built through the services (after ``setup_django``), as a real project is.
    Returns ``(project, manager, agent, reviewer, spec)``.
    """
    from decisions import services as decisions
    from projects import services as project_services
    from tests.factories import CRITERIA, UserFactory

    project = project_services.project_create(slug=slug, name=f"{slug} bench", gate_policy={})
    manager, agent, reviewer = (UserFactory(username=name) for name in ("m", "a", "r"))
    for user, role in ((manager, "manager"), (agent, "agent"), (reviewer, "reviewer")):
        project_services.membership_grant(user=user, project=project, role=role)
    spec = decisions.spec_create(
        project=project, actor=manager, title="spec", body=spec_body, criteria=CRITERIA
    )
    decisions.spec_version_accept(version=spec.versions.get(), actor=manager)
    return project, manager, agent, reviewer, spec
