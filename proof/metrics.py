"""The site's own /metrics beside the proof's counts: the figures a run printed, and where
they disagree.

What the metrics say is checked against the database (the truth) and against what the
agents saw. A count is written just after its transaction commits, so a server process
killed in between loses it: against the database the check is exact unless the scenario
kills server processes; against the agents, only when nothing failed on either side.
"""

import httpx
import psycopg
from prometheus_client.parser import text_string_to_metric_families


def scrape(base: str, token: str) -> dict:
    """``{(sample name, frozenset of labels): value}`` from the stack's /metrics."""
    answer = httpx.get(f"{base}/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=60)
    answer.raise_for_status()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


def total(samples: dict, name: str, **labels) -> int:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    wanted = set(labels.items())
    return round(sum(v for (n, found), v in samples.items() if n == name and wanted <= found))


def _database(url: str) -> dict:
    with psycopg.connect(url) as conn:

        def one(sql: str) -> int:
            return conn.execute(sql).fetchone()[0]

        return {
            "claims": one("SELECT count(*) FROM tasks_attempt"),
            "gate_runs": one(
                "SELECT count(*) FROM evidence_gaterun WHERE state IN ('passed', 'failed', 'error')"
            ),
            "lease_expiries": one(
                "SELECT count(*) FROM tasks_event e JOIN django_content_type ct"
                " ON ct.id = e.content_type_id"
                " WHERE ct.app_label = 'tasks' AND ct.model = 'attempt' AND e.transition = 'expire'"
            ),
            "webhooks_delivered": one(
                "SELECT count(*) FROM events_delivery WHERE status = 'delivered'"
            ),
            "tasks_done": one("SELECT count(*) FROM tasks_task WHERE state = 'done'"),
        }


def compare(
    samples: dict, url: str, journal: dict, statuses: dict, *, exact_db: bool, exact_agents: bool
) -> dict:
    """Each figure of the metrics beside the database's and the agents'; a violation for
    each that disagrees where the scenario lets them agree.

    The server answers some requests whose answer an agent never reads (its read timed
    out, the connection dropped): the metrics may then exceed the agents' counts by at
    most the agents' transport errors, and by nothing more.
    """
    database = _database(url)
    figures = {
        name: {"metrics": total(samples, metric, **labels), "database": database[name]}
        for name, metric, labels in (
            ("claims", "factory_claims_total", {}),
            ("gate_runs", "factory_gate_runs_total", {}),
            ("lease_expiries", "factory_lease_expiries_total", {}),
            ("webhooks_delivered", "factory_webhook_deliveries_total", {"outcome": "delivered"}),
            ("tasks_done", "factory_tasks", {"state": "done"}),
        )
    }
    requests = "factory_http_requests_total"
    lost = sum(n for status, n in statuses.items() if not status.isdigit())
    answered = {
        "claims_answered": (
            total(samples, requests, route="api-task-claim", status="201"),
            journal["claimed"],
        ),
        "submits_answered": (
            total(samples, requests, route="api-attempt-submit", status="202"),
            journal["submitted"],
        ),
        "requests": (
            total(samples, requests) - total(samples, requests, route="metrics"),
            sum(n for status, n in statuses.items() if status.isdigit()),
        ),
    }
    figures.update(
        {name: {"metrics": seen, "agents": got} for name, (seen, got) in answered.items()}
    )
    found = []
    if exact_db:
        found += [
            f"{name}: the metrics say {f['metrics']}, the database {f['database']}"
            for name, f in figures.items()
            if "database" in f and f["metrics"] != f["database"]
        ]
    if exact_agents:
        found += [
            f"{name}: the metrics say {seen}, the agents read {got} (and lost {lost} answers)"
            for name, (seen, got) in answered.items()
            if not got <= seen <= got + lost
        ]
    return {
        "figures": {**figures, "agents_lost_answers": lost},
        "exact": {"database": exact_db, "agents": exact_agents},
        "violations": len(found),
        "examples": found[:5],
    }
