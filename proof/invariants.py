"""The promises, checked with SQL over the whole database and against the agents' journals.

Each check returns the number of violations and a few examples; zero everywhere is a pass.
"""

import hashlib
import json
from pathlib import Path

import psycopg

LIVE = ("running", "checking", "passed")
ENDED = ("approved", "rejected", "failed", "released", "abandoned", "blocked")


def _content_type(conn, app: str, model: str) -> int:
    return conn.execute(
        "SELECT id FROM django_content_type WHERE app_label = %s AND model = %s", (app, model)
    ).fetchone()[0]


def never_two_live_attempts(conn) -> dict:
    """From the events: no two attempts of one task were live (running, checking or passed) at
    once. An attempt starts with a claim (``start``) or a person's push (``push``)."""
    attempt_type = _content_type(conn, "tasks", "attempt")
    rows = conn.execute(
        """
        WITH life AS (
            SELECT a.id, a.task_id,
                   min(e.created_at) FILTER (WHERE e.transition IN ('start', 'push')) AS started,
                   min(e.created_at) FILTER (WHERE e.to_state = ANY(%s)) AS ended
            FROM tasks_attempt a JOIN tasks_event e ON e.content_type_id = %s AND e.object_id = a.id
            GROUP BY a.id, a.task_id
        )
        SELECT x.task_id, x.id, y.id FROM life x JOIN life y
          ON x.task_id = y.task_id AND x.id < y.id
         AND y.started < coalesce(x.ended, 'infinity') AND x.started < coalesce(y.ended, 'infinity')
        LIMIT 20
        """,
        (list(ENDED), attempt_type),
    ).fetchall()
    live_now = conn.execute(
        "SELECT task_id FROM tasks_attempt WHERE state = ANY(%s) GROUP BY task_id HAVING count(*) > 1",
        (list(LIVE),),
    ).fetchall()
    return {"violations": len(rows) + len(live_now), "examples": [list(r) for r in rows[:5]]}


def audit_matches_state(conn) -> dict:
    """The last event of every task, attempt and gate run ends in its current state."""
    found = []
    for app, model, table in (
        ("tasks", "task", "tasks_task"),
        ("tasks", "attempt", "tasks_attempt"),
        ("evidence", "gaterun", "evidence_gaterun"),
    ):
        kind = _content_type(conn, app, model)
        rows = conn.execute(
            f"""
            SELECT o.id, o.state, last.to_state FROM {table} o
            LEFT JOIN LATERAL (
                SELECT e.to_state FROM tasks_event e
                WHERE e.content_type_id = %s AND e.object_id = o.id AND e.transition <> 'edit'
                ORDER BY e.id DESC LIMIT 1
            ) last ON true
            WHERE last.to_state IS DISTINCT FROM o.state
            LIMIT 20
            """,
            (kind,),
        ).fetchall()
        found += [f"{model} {r[0]} is {r[1]}, last event says {r[2]}" for r in rows]
    return {"violations": len(found), "examples": found[:5]}


def nothing_stuck(conn, *, expect_all_done: bool) -> dict:
    """After the reconciler has run: no expired live lease, no pending gate, no unconcluded check."""
    found = []
    found += [
        f"attempt {r[0]} running past its lease"
        for r in conn.execute(
            "SELECT id FROM tasks_attempt WHERE state = 'running' AND lease_expires_at < now() LIMIT 20"
        )
    ]
    found += [
        f"gate run {r[0]} still {r[1]}"
        for r in conn.execute(
            "SELECT id, state FROM evidence_gaterun WHERE state IN ('queued', 'running') LIMIT 20"
        )
    ]
    found += [
        f"attempt {r[0]} still checking"
        for r in conn.execute("SELECT id FROM tasks_attempt WHERE state = 'checking' LIMIT 20")
    ]
    if expect_all_done:
        found += [
            f"task {r[0]} is {r[1]}"
            for r in conn.execute(
                "SELECT key, state FROM tasks_task WHERE state NOT IN ('done', 'cancelled') LIMIT 20"
            )
        ]
    return {"violations": len(found), "examples": found[:5]}


def acknowledged_submits_kept(conn, journals: list[Path], media: Path) -> dict:
    """Every submit the API acknowledged (2xx) is stored exactly once, with its evidence,
    whose stored bytes hash to the SHA-256 the API returned and the agent computed."""
    submit_counts = dict(
        conn.execute(
            "SELECT object_id, count(*) FROM tasks_event WHERE transition = 'submit' AND content_type_id = %s "
            "GROUP BY object_id",
            (_content_type(conn, "tasks", "attempt"),),
        ).fetchall()
    )
    found, acknowledged = [], 0
    for journal in journals:
        for line in journal.read_text().splitlines():
            fact = json.loads(line)
            if "submitted" not in fact:
                continue
            acknowledged += 1
            attempt = fact["submitted"]
            row = conn.execute(
                "SELECT idempotency_key, submitted_at IS NOT NULL FROM tasks_attempt WHERE id = %s",
                (attempt,),
            ).fetchone()
            if row is None or row[0] != fact["key"] or not row[1]:
                found.append(f"attempt {attempt}: acknowledged submit not stored ({row})")
            if submit_counts.get(attempt) != 1:
                found.append(f"attempt {attempt}: {submit_counts.get(attempt)} submit events")
            for evidence_id, sha, local in fact["evidence"]:
                stored = conn.execute(
                    "SELECT sha256, file, attempt_id FROM evidence_evidence WHERE id = %s",
                    (evidence_id,),
                ).fetchone()
                if stored is None or stored[0] != sha or sha != local or stored[2] != attempt:
                    found.append(f"evidence {evidence_id}: {stored} vs {sha}/{local}")
                    continue
                if hashlib.sha256((media / stored[1]).read_bytes()).hexdigest() != sha:
                    found.append(f"evidence {evidence_id}: stored bytes do not hash to {sha}")
    return {"violations": len(found), "acknowledged": acknowledged, "examples": found[:5]}


def server_errors(journals: list[Path]) -> dict:
    """No 5xx other than 503 (which must carry Retry-After)."""
    found = [
        line
        for journal in journals
        for line in journal.read_text().splitlines()
        if '"error"' in line
    ]
    return {"violations": len(found), "examples": found[:5]}


def check_all(url: str, journals: list[Path], media: Path, *, expect_all_done: bool) -> dict:
    with psycopg.connect(url) as conn:
        return {
            "never_two_live_attempts": never_two_live_attempts(conn),
            "audit_matches_state": audit_matches_state(conn),
            "nothing_stuck": nothing_stuck(conn, expect_all_done=expect_all_done),
            "acknowledged_submits_kept": acknowledged_submits_kept(conn, journals, media),
            "no_server_errors": server_errors(journals),
        }
