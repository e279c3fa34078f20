"""Moving the kernel's models between apps moved no row: a demo database filled on the
layout before the move (tests/fixtures/) is migrated to today's layout, and its row counts,
its rows and the audit trail's links to its subjects are what they were."""

import gzip
import os
import shutil
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
from django.db import connection

from tests.conftest import postgres_only

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
TABLES = [
    "auth_user",
    "knox_authtoken",
    "tasks_project",
    "tasks_membership",
    "tasks_event",
    "tasks_task",
    "tasks_attempt",
    "tasks_label",
    "decisions_spec",
    "decisions_specversion",
    "decisions_criterion",
    "decisions_decision",
    "evidence_evidence",
    "evidence_gaterun",
]
SAMPLED = ["tasks_project", "tasks_membership", "tasks_event", "evidence_evidence"]
MOVED = ["project", "membership", "event"]
# Later migrations add columns (the runner's default_branch and verify); the rows keep
# every value they had in the columns they had.
COLUMNS = {
    "tasks_project": "id, slug, name, repository_url, gate_policy, max_attempts, task_seq, "
    "spec_seq, decision_seq, created_at",
    # A column made nullable is rebuilt last on SQLite: read by name, not by place.
    "tasks_membership": "id, role, created_at, user_id, project_id",
    "tasks_event": "id, object_id, object_key, transition, from_state, to_state, reason, "
    "extra, created_at, actor_id, content_type_id, project_id, task_id",
}
# Each event's subject, through its content type: the links the audit trail lives by.
SUBJECTS = """
    SELECT e.id, ct.app_label, ct.model FROM tasks_event e
    JOIN django_content_type ct ON ct.id = e.content_type_id ORDER BY e.id
"""


def snapshot(cursor) -> dict:
    state = {}
    for table in TABLES:
        cursor.execute(f"SELECT count(*) FROM {table}")
        state[table] = cursor.fetchone()[0]
    for table in SAMPLED:
        cursor.execute(f"SELECT {COLUMNS.get(table, '*')} FROM {table} ORDER BY id LIMIT 200")
        state[f"{table} rows"] = [tuple(row) for row in cursor.fetchall()]
    cursor.execute(SUBJECTS)
    state["subjects"] = [
        (event, "projects" if model in MOVED else app, model)
        for event, app, model in cursor.fetchall()
    ]
    return state


def migrate(database_url: str) -> None:
    env = {**os.environ, "DATABASE_URL": database_url}
    env["DJANGO_SETTINGS_MODULE"] = "factory_site.settings_test"
    done = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--no-input"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Applying projects.0001_initial... OK" in done.stdout


def moved_content_types(cursor) -> list:
    cursor.execute(
        "SELECT app_label, model FROM django_content_type WHERE model IN"
        " ('project', 'membership', 'event') ORDER BY model"
    )
    return [tuple(row) for row in cursor.fetchall()]


def test_a_sqlite_demo_database_keeps_every_row_through_the_move(tmp_path):
    database = tmp_path / "before.sqlite3"
    with gzip.open(FIXTURES / "before-the-kernel.sqlite3.gz") as packed, database.open("wb") as out:
        shutil.copyfileobj(packed, out)
    with sqlite3.connect(database) as db:
        before = snapshot(db.cursor())

    migrate(f"sqlite:///{database}")

    with sqlite3.connect(database) as db:
        after = snapshot(db.cursor())
        content_types = moved_content_types(db.cursor())
    assert after == before
    assert before["tasks_event"] > 100 and before["tasks_project"] == 1
    assert content_types == [
        ("projects", "event"),
        ("projects", "membership"),
        ("projects", "project"),
    ]


@postgres_only
def test_a_postgresql_demo_database_keeps_every_row_through_the_move():
    settings = connection.settings_dict
    server = f"postgres://{settings['USER']}@{settings['HOST']}:{settings['PORT']}"
    name = f"fm_layout_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        sql = gzip.decompress((FIXTURES / "before-the-kernel.pg.sql.gz").read_bytes())
        loaded = subprocess.run(
            ["psql", "-q", "-v", "ON_ERROR_STOP=1", f"{server}/{name}"],
            input=sql,
            capture_output=True,
            timeout=120,
        )
        assert loaded.returncode == 0, loaded.stderr[-2000:]
        with psycopg.connect(f"{server}/{name}") as db:
            before = snapshot(db.cursor())

        migrate(f"{server}/{name}")

        with psycopg.connect(f"{server}/{name}") as db:
            after = snapshot(db.cursor())
            content_types = moved_content_types(db.cursor())
    finally:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    assert after == before
    assert before["tasks_event"] > 100 and before["tasks_project"] == 1
    assert content_types == [
        ("projects", "event"),
        ("projects", "membership"),
        ("projects", "project"),
    ]
