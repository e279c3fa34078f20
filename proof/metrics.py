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
    """Each figure from the metrics beside the database's and the agents'; a violation for
    each that disagrees where the scenario lets them be exact."""
    database = _database(url)
    metrics = {
        "claims": total(samples, "factory_claims_total"),
        "gate_runs": total(samples, "factory_gate_runs_total"),
        "lease_expiries": total(samples, "factory_lease_expiries_total"),
        "webhooks_delivered": total(
            samples, "factory_webhook_deliveries_total", outcome="delivered"
        ),
        "tasks_done": total(samples, "factory_tasks", state="done"),
    }
    requests = total(samples, "factory_http_requests_total") - total(
        samples, "factory_http_requests_total", route="metrics"
    )
    agents = {
        "claims": journal["claimed"],
        "submits": journal["submitted"],
        "requests": sum(n for status, n in statuses.items() if status.isdigit()),
    }
    seen = {
        "claims": total(
            samples, "factory_http_requests_total", route="api-task-claim", status="201"
        ),
        "submits": total(
            samples, "factory_http_requests_total", route="api-attempt-submit", status="202"
        ),
        "requests": requests,
    }
    found = []
    if exact_db:
        found += [
            f"{name}: the metrics say {metrics[name]}, the database {database[name]}"
            for name in metrics
            if metrics[name] != database[name]
        ]
    if exact_agents:
        found += [
            f"{name}: the metrics say {seen[name]}, the agents {agents[name]}"
            for name in agents
            if seen[name] != agents[name]
        ]
    return {
        "figures": {
            **{name: {"metrics": metrics[name], "database": database[name]} for name in metrics},
            **{name: {"metrics": seen[name], "agents": agents[name]} for name in agents},
        },
        "exact": {"database": exact_db, "agents": exact_agents},
        "violations": len(found),
        "examples": found[:5],
    }
