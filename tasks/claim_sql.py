"""The claim as one PostgreSQL statement: the fast path of ``tasks.attempts.task_claim``.

A claim on the ORM takes eleven round trips (expire overdue leases, BEGIN, lock the
candidate, insert the attempt, its event, update the task, its event, COMMIT, ...).
This statement does the same writes in one: a writable CTE that locks the best
claimable row with ``FOR NO KEY UPDATE SKIP LOCKED``, inserts the attempt, moves the
task ``ready → claimed`` and writes the two events that ``fire`` would write; then,
in the same transaction, the kernel's ``event_recorded`` is sent for both, as
``Event.record`` would. ``tests/tasks/test_claim_sql.py`` holds it to the ORM path:
same rows, same events, same refusals.

It steps aside (returns ``OVERDUE``) when a lease in the caller's projects has run
out: expiring needs the state machine's ``expire`` transitions, which the ORM path
runs before it claims. Everything it decides besides — the candidate's conditions,
the transition's source state — is the ORM path's, written in SQL:

- ready, attempts left (``failed_attempts < max_attempts``), every dependency done,
  every label asked for (``claimable_tasks``);
- priority, then age, then id (the ``task_claim_order`` index);
- the spec version accepted at claim time pinned on the attempt.
"""

import functools
import json
import re
import time
from decimal import Decimal
from typing import NamedTuple

import psycopg
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction

from decisions.models import Spec, SpecVersion, SpecVersionState
from projects.models import Event, Project
from projects.signals import event_recorded
from tasks.models import Attempt, AttemptState, Task, TaskState


class Aside(NamedTuple):
    """Why the statement claimed nothing though there may be work: a lease ran out in the
    caller's projects (``overdue``: the ORM path must expire it first), or a project asks
    for more than the statement does (a monthly budget to check, overlap to avoid). In the
    second case ``projects`` are the caller's projects with those settings, as
    ``Project`` references (id, slug, landing, claim_avoid_overlap, budget_usd); else None."""

    overdue: bool
    projects: list[Project] | None


OVERDUE = Aside(overdue=True, projects=None)

# ``Project.avoids_overlap`` of the project ``p``, in SQL (tests/tasks/test_claim_sql.py
# holds the two equal for every setting), and what the claim reads of ``p`` when one of
# the caller's projects has a budget or avoids overlap (``_projects``).
AVOIDS_OVERLAP = (
    "coalesce(p.claim_avoid_overlap, p.landing ->> 'mode' in ('push', 'pull_request'), false)"
)
SETTINGS_OUT = (
    "'id', p.id, 'slug', p.slug, 'landing', p.landing,"
    " 'claim_avoid_overlap', p.claim_avoid_overlap, 'budget_usd', p.budget_usd::text"
)

# The rows the statement returns whole, by their alias in it (the primary key first).
_ROWS = [("a", Attempt), ("tk", Task), ("p", Project), ("s", Spec), ("sv", SpecVersion)]


# Columns of a new attempt that the statement computes; every other one gets the value
# the model itself would write (its defaults included), so a field added to ``Attempt``
# cannot be forgotten here.
_COMPUTED = {"id", "task_id", "number", "spec_version_id"}


def _attempt_fields():
    return [f for f in Attempt._meta.concrete_fields if f.attname not in _COMPUTED]


def _attempt_columns() -> list[str]:
    return [connection.ops.quote_name(f.column) for f in _attempt_fields()]


def _attempt_values(given: dict) -> list:
    """The new attempt's column values: ``given`` (by attname), else what the model would
    write. What is the same for every new attempt is prepared once per process."""
    same = _same_for_every_attempt()
    template = None
    values = []
    for f in _attempt_fields():
        if f.attname in given:
            values.append(f.get_db_prep_save(given[f.attname], connection))
        elif f.attname in same:
            values.append(same[f.attname])
        else:  # a default made at each save (a time, an id): as the model makes it
            template = template or Attempt(**given)
            values.append(f.get_db_prep_save(f.pre_save(template, add=True), connection))
    return values


@functools.cache
def _same_for_every_attempt() -> dict:
    """Columns a new attempt gets the same value in every time: no default, a constant, or
    a new empty dict or list; nothing ``pre_save`` sets (``auto_now``). Prepared once."""
    return {
        f.attname: f.get_db_prep_save(f.get_default(), connection)
        for f in _attempt_fields()
        if (not f.has_default() or not callable(f.default) or f.default in (dict, list))
        and not getattr(f, "auto_now", False)
        and not getattr(f, "auto_now_add", False)
    }


# The two events ``fire`` writes for a claim, field by field (``c`` is the candidate task,
# ``a`` the new attempt). Every field of ``Event`` must be here: _event_columns checks,
# so a field added to the audit trail cannot be forgotten by the claim.
START_EVENT = {
    "project_id": "c.project_id",
    "task_id": "c.id",
    "content_type_id": "%(attempt_type)s",
    "object_id": "a.id",
    "object_key": "c.key || '#' || a.number",
    "actor_id": "%(agent)s",
    "transition": "'start'",
    "from_state": "''",
    "to_state": "%(running)s",
    "reason": "''",
    "extra": "%(start_extra)s::jsonb",
    "created_at": "%(now)s",
}
CLAIM_EVENT = {
    **START_EVENT,
    "content_type_id": "%(task_type)s",
    "object_id": "c.id",
    "object_key": "c.key",
    "transition": "'claim'",
    "from_state": "%(ready)s",
    "to_state": "%(claimed)s",
    "extra": "jsonb_build_object('attempt', a.number)",
}


def _event_fields():
    return [f for f in Event._meta.concrete_fields if not f.primary_key]


def _event_columns(values: dict) -> str:
    unknown = {f.attname for f in _event_fields()} ^ set(values)
    if unknown:
        raise ImproperlyConfigured(f"the claim statement does not write Event fields {unknown}")
    return ", ".join(connection.ops.quote_name(f.column) for f in _event_fields())


def _event_values(values: dict) -> str:
    return ", ".join(values[f.attname] for f in _event_fields())


class _PreparingCursor(psycopg.RawCursor):
    """Binds parameters on the server and prepares what it runs: planning this
    statement costs as much as running it, and a prepared one is planned once per
    connection (unless settings turn prepared statements off). Its placeholders are
    PostgreSQL's own (``$1``), numbered once when the statement is built: psycopg parses
    ``%(name)s`` placeholders on every call for a statement this long (it caches the
    parse only up to ``MAX_CACHED_STATEMENT_LENGTH``, 4096 characters), and that parse
    was a quarter of a claim's Python."""

    def execute(self, query, params=None, **kwargs):
        return super().execute(query, params, prepare=True, **kwargs)


_NAMED = re.compile(r"%\((\w+)\)s")


class _Statement(NamedTuple):
    """A statement in PostgreSQL's placeholders, and the name of each in their order."""

    sql: bytes
    names: tuple[str, ...]

    @classmethod
    def numbered(cls, sql: str) -> "_Statement":
        """``sql`` written with ``%(name)s`` placeholders, each name numbered once (``$1``)."""
        names: dict[str, int] = {}

        def number(match: re.Match) -> str:
            return f"${names.setdefault(match[1], len(names) + 1)}"

        return cls(_NAMED.sub(number, sql).encode(), tuple(names))

    def params(self, values: dict) -> list:
        return [values[name] for name in self.names]


def _execute_prepared(statement: _Statement, params: dict):
    """Run ``statement`` on Django's connection in a ``_PreparingCursor`` (database errors
    wrapped as Django's); return its one row. Logged like Django's own queries."""
    connection.ensure_connection()
    began = time.monotonic()
    with connection.make_cursor(_PreparingCursor(connection.connection)) as cursor:
        cursor.execute(statement.sql, statement.params(params))
        row = cursor.fetchone()
    if connection.queries_logged:  # as CursorDebugWrapper does, which cannot show this one
        connection.queries_log.append(
            {"sql": statement.sql.decode(), "time": f"{time.monotonic() - began:.3f}"}
        )
    return row


@functools.cache
def _statement(project_count: int, with_labels: bool) -> _Statement:
    """The claim statement for that many projects, with or without a label filter: the
    same text every time, built once per process (the database prepares it once too)."""
    columns = _attempt_columns()
    label_filter = ""
    if with_labels:
        label_filter = """
          AND (SELECT count(DISTINCT l.name) FROM tasks_task_labels tl
               JOIN tasks_label l ON l.id = tl.label_id
               WHERE tl.task_id = t.id AND l.name = ANY(%(labels)s)) = %(label_count)s"""
    event_columns = _event_columns(START_EVENT)
    rows_out = ", ".join(
        f"{alias}.{connection.ops.quote_name(f.column)}"
        for alias, model in _ROWS
        for f in model._meta.concrete_fields
    )
    placeholders = ", ".join(f"%(a{i})s" for i in range(len(columns)))
    # IN with one placeholder per project, as the ORM writes it: PostgreSQL plans
    # ``IN (x)`` as ``= x`` and walks the claim-order index, where ``= ANY(array)``
    # would sort every ready task.
    projects = ", ".join(f"%(p{i})s" for i in range(project_count))
    sql = f"""
    WITH overdue AS (
        SELECT EXISTS (
            SELECT 1 FROM tasks_attempt a JOIN tasks_task ot ON ot.id = a.task_id
            WHERE a.state = %(running)s AND a.lease_expires_at <= %(now)s
              AND ot.project_id IN ({projects})
        ) AS found
    ),
    settings AS (
        SELECT coalesce(bool_or({AVOIDS_OVERLAP} OR p.budget_usd IS NOT NULL), false) AS aside,
               json_agg(json_build_object({SETTINGS_OUT})) AS projects
        FROM tasks_project p WHERE p.id IN ({projects})
    ),
    candidate AS (
        SELECT t.id, t.project_id, t.key, t.attempt_count, t.spec_id FROM tasks_task t
        WHERE t.project_id IN ({projects}) AND t.state = %(ready)s
          AND t.failed_attempts < t.max_attempts
          AND NOT (SELECT found FROM overdue)
          AND (%(settings_read)s OR NOT (SELECT aside FROM settings))
          AND NOT EXISTS (
              SELECT 1 FROM tasks_task_depends_on d JOIN tasks_task dt ON dt.id = d.to_task_id
              WHERE d.from_task_id = t.id AND dt.state <> %(done)s
          ){label_filter}
        ORDER BY t.priority DESC, t.created_at, t.id
        LIMIT 1
        FOR NO KEY UPDATE OF t SKIP LOCKED
    ),
    attempt AS (
        INSERT INTO tasks_attempt (task_id, number, spec_version_id, {", ".join(columns)})
        SELECT c.id, c.attempt_count + 1,
               (SELECT sv.id FROM decisions_specversion sv
                WHERE sv.spec_id = c.spec_id AND sv.state = %(accepted)s LIMIT 1),
               {placeholders}
        FROM candidate c
        RETURNING *
    ),
    task AS (
        UPDATE tasks_task t
        SET state = %(claimed)s, attempt_count = a.number, current_attempt_id = a.id,
            updated_at = %(now)s
        FROM attempt a
        WHERE t.id = a.task_id AND t.state = %(ready)s
        RETURNING t.*
    ),
    events AS (
        INSERT INTO {Event._meta.db_table} ({event_columns})
        SELECT {_event_values(START_EVENT)}
        FROM attempt a JOIN candidate c ON c.id = a.task_id
        UNION ALL
        SELECT {_event_values(CLAIM_EVENT)}
        FROM attempt a JOIN candidate c ON c.id = a.task_id JOIN task ON task.id = c.id
        RETURNING id, transition
    )
    SELECT o.found,
           CASE WHEN st.aside AND NOT %(settings_read)s THEN st.projects::text END,
           (SELECT e.id FROM events e WHERE e.transition = 'start'),
           (SELECT e.id FROM events e WHERE e.transition = 'claim'),
           {rows_out},
           ARRAY(SELECT l.name FROM tasks_task_labels tl JOIN tasks_label l ON l.id = tl.label_id
                 WHERE tl.task_id = tk.id ORDER BY l.name),
           ARRAY(SELECT dt.key FROM tasks_task_depends_on d JOIN tasks_task dt ON dt.id = d.to_task_id
                 WHERE d.from_task_id = tk.id ORDER BY dt.number)
    FROM overdue o
    CROSS JOIN settings st
    LEFT JOIN attempt a ON true
    LEFT JOIN task tk ON tk.id = a.task_id
    LEFT JOIN tasks_project p ON p.id = tk.project_id
    LEFT JOIN decisions_spec s ON s.id = tk.spec_id
    LEFT JOIN decisions_specversion sv ON sv.id = a.spec_version_id
    """
    return _Statement.numbered(sql)


def claim(
    *, agent, project_ids: list[int], labels: list[str], lease, now, settings_read: bool = False
):
    """Claim in one statement: the new attempt (its task, project, spec and labels
    loaded by the same statement), ``None`` when nothing is claimable, or ``Aside``
    when a lease must be expired first or a project has a budget or avoids overlap
    (unless ``settings_read``: the caller has checked the budgets already)."""
    lease_expires_at = now + lease
    values = _attempt_values(
        {
            "agent_id": agent.pk,
            "state": AttemptState.RUNNING,
            "lease_expires_at": lease_expires_at,
            "heartbeat_at": now,
            "started_at": now,
        }
    )
    statement = _statement(len(project_ids), bool(labels))
    attempt_type = ContentType.objects.get_for_model(Attempt).pk
    task_type = ContentType.objects.get_for_model(Task).pk
    params = {f"a{i}": value for i, value in enumerate(values)}
    params.update({f"p{i}": pid for i, pid in enumerate(project_ids)})
    params.update(
        labels=list(labels),
        label_count=len(set(labels)),
        now=now,
        agent=agent.pk,
        running=AttemptState.RUNNING,
        ready=TaskState.READY,
        claimed=TaskState.CLAIMED,
        done=TaskState.DONE,
        accepted=SpecVersionState.ACCEPTED,
        attempt_type=attempt_type,
        task_type=task_type,
        settings_read=settings_read,
        start_extra=json.dumps({"lease_expires_at": lease_expires_at.isoformat()}),
    )
    # A transaction of its own or the caller's (``task_claim`` checks a budget in the same
    # one), so that what the kernel's seam writes for the two events (the webhook outbox,
    # ADR 0013) commits with them or not at all; never a savepoint, a round trip more.
    with transaction.atomic(savepoint=False):
        row = _execute_prepared(statement, params)
        if row[0] or row[1] is not None:
            return Aside(overdue=row[0], projects=_projects(row[1]))
        if row[4] is None:
            return None
        attempt = _attempt_from_row(row[4:], agent)
        start = json.loads(params["start_extra"])
        for pk, subject, extra in (
            (row[2], attempt, start),
            (row[3], attempt.task, {"attempt": attempt.number}),
        ):
            event = _written_event(pk, subject, attempt, extra, now)
            event_recorded.send(sender=Event, event=event, subject=subject)
    return attempt


def _projects(settings: str | None) -> list[Project] | None:
    """The projects' settings the statement returned (JSON), as ``Project`` references."""
    if settings is None:
        return None
    return [
        Project(
            pk=project["id"],
            slug=project["slug"],
            landing=project["landing"],
            claim_avoid_overlap=project["claim_avoid_overlap"],
            budget_usd=None if project["budget_usd"] is None else Decimal(project["budget_usd"]),
        )
        for project in json.loads(settings)
    ]


def _written_event(pk, subject, attempt, extra, now) -> Event:
    """The Event the statement wrote, as ``Event.record`` would have returned it."""
    claim = subject is attempt.task
    values = CLAIM_EVENT if claim else START_EVENT
    return Event(
        pk=pk,
        project_id=attempt.task.project_id,
        task_id=attempt.task_id,
        content_type=ContentType.objects.get_for_model(type(subject)),
        object_id=subject.pk,
        object_key=str(subject),
        actor=attempt.agent,
        transition=values["transition"].strip("'"),
        from_state=TaskState.READY if claim else "",
        to_state=TaskState.CLAIMED if claim else AttemptState.RUNNING,
        reason="",
        extra=extra,
        created_at=now,
    )


def _instance(model, fields, values):
    attnames, converters = _loading(model)
    values = list(values)
    for i, convert in converters:
        values[i] = convert(values[i], None, connection)
    return model.from_db(connection.alias, attnames, values)


@functools.cache
def _loading(model) -> tuple[list[str], list[tuple]]:
    """A model's column names and the converter of each column that has one, by position:
    what Django's compiler applies to a row it reads."""
    fields = model._meta.concrete_fields
    converters = [(i, f.from_db_value) for i, f in enumerate(fields) if hasattr(f, "from_db_value")]
    return [f.attname for f in fields], converters


def _attempt_from_row(row, agent) -> Attempt:
    """The claimed attempt with everything the claim's answer shows, from the one row:
    its task with its project, spec, labels and dependencies, and its spec version."""
    loaded = {}
    for alias, model in _ROWS:
        fields = model._meta.concrete_fields
        values, row = row[: len(fields)], row[len(fields) :]
        if values[0] is not None:  # the task may have no spec, the attempt no version
            loaded[alias] = _instance(model, fields, values)
    label_names, dependency_keys = row
    attempt, task = loaded["a"], loaded["tk"]
    task.project, task.spec = loaded["p"], loaded.get("s")
    attempt.spec_version = loaded.get("sv")
    if attempt.spec_version is not None:
        attempt.spec_version.spec = task.spec
    task.related_keys = {"labels": label_names, "depends_on": dependency_keys}
    attempt.task, attempt.agent = task, agent
    return attempt
