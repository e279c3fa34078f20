"""The one-statement claim on PostgreSQL writes what the ORM path writes.

``tasks.claim_sql`` is the fast path of ``attempts.task_claim``; these tests claim
twin tasks, one through each path, and compare every row and event they leave.
"""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.contenttypes.models import ContentType
from django.utils import timezone

from projects.models import Event, Project
from tasks import attempts, claim_sql
from tasks.models import Attempt, Task
from tests.conftest import postgres_only
from tests.factories import expire_lease

pytestmark = [pytest.mark.django_db, postgres_only]

VOLATILE_ATTEMPT = {"id", "task_id", "lease_expires_at", "heartbeat_at", "started_at"}
VOLATILE_TASK = {"id", "number", "key", "title", "current_attempt_id", "created_at", "updated_at"}


def orm_only(monkeypatch):
    """Make ``task_claim`` take its ORM path, as it does when a lease must expire first."""
    monkeypatch.setattr(claim_sql, "claim", lambda **kwargs: claim_sql.OVERDUE)


def row(instance, volatile):
    return {
        f.attname: f.value_from_object(instance)
        for f in instance._meta.concrete_fields
        if f.attname not in volatile
    }


def events_of(attempt):
    events = Event.objects.filter(task=attempt.task_id).order_by("created_at", "id")
    return [
        (
            e.content_type.model,
            e.object_key.replace(attempt.task.key, "KEY"),
            e.actor_id,
            e.transition,
            e.from_state,
            e.to_state,
            e.reason,
            sorted(e.extra),
            e.extra.get("attempt"),
        )
        for e in events
    ]


def twins(flow, **kwargs):
    spec = flow.spec()
    first = flow.ready(title="twin", spec=spec, **kwargs)
    second = flow.ready(title="twin", spec=spec, **kwargs)
    return first, second


def test_both_paths_write_the_same_attempt_task_and_events(flow, monkeypatch):
    first, second = twins(flow, labels=["backend"], allowed_paths=["tasks/**"])

    fast = attempts.task_claim(agent=flow.agent, labels=["backend"], lease_seconds=600)
    orm_only(monkeypatch)
    slow = attempts.task_claim(agent=flow.agent, labels=["backend"], lease_seconds=600)

    assert (fast.task_id, slow.task_id) == (first.pk, second.pk)
    fast_row, slow_row = Attempt.objects.get(pk=fast.pk), Attempt.objects.get(pk=slow.pk)
    assert row(fast_row, VOLATILE_ATTEMPT) == row(slow_row, VOLATILE_ATTEMPT)
    assert fast_row.spec_version_id == first.spec.versions.get(state="accepted").pk
    for attempt in (fast_row, slow_row):
        assert attempt.lease_expires_at - attempt.heartbeat_at == timedelta(seconds=600)
    tasks = Task.objects.get(pk=first.pk), Task.objects.get(pk=second.pk)
    assert row(tasks[0], VOLATILE_TASK) == row(tasks[1], VOLATILE_TASK)
    assert [t.current_attempt_id for t in tasks] == [fast.pk, slow.pk]
    assert all(t.updated_at > t.created_at for t in tasks)
    assert events_of(fast_row) == events_of(slow_row)
    start = Event.objects.get(object_id=fast.pk, transition="start")
    assert start.extra == {"lease_expires_at": fast_row.lease_expires_at.isoformat()}


def test_the_claimed_attempt_comes_with_whole_rows_not_stubs(flow):
    task = flow.ready(spec=flow.spec())

    attempt = attempts.task_claim(agent=flow.agent)

    stored = Attempt.objects.select_related("task__project", "task__spec", "spec_version").get(
        pk=attempt.pk
    )
    assert attempt.task_id == task.pk
    for loaded, fresh in [
        (attempt, stored),
        (attempt.task, stored.task),
        (attempt.task.project, stored.task.project),
        (attempt.task.spec, stored.task.spec),
        (attempt.spec_version, stored.spec_version),
    ]:
        assert row(loaded, set()) == row(fresh, set())
    assert attempt.spec_version.spec is attempt.task.spec


def test_the_statement_claims_nothing_that_the_orm_path_would_refuse(flow, other_flow):
    first = flow.ready(title="first")
    flow.ready(title="waits", depends_on=[first], priority=9)
    flow.ready(title="labelled", labels=["ops"], priority=8)
    used_up = flow.ready(title="used up", max_attempts=1, priority=7)
    Task.objects.filter(pk=used_up.pk).update(failed_attempts=1)
    other_flow.ready(title="elsewhere", priority=9)
    events_before = Event.objects.count()

    claimed = attempts.task_claim(agent=flow.agent, labels=["ops", "backend"])
    assert claimed is None
    assert Event.objects.count() == events_before

    claimed = attempts.task_claim(agent=flow.agent)
    assert claimed.task.title == "labelled"
    assert attempts.task_claim(agent=flow.agent).task.title == "first"
    assert attempts.task_claim(agent=flow.agent) is None


def test_an_overdue_lease_sends_the_claim_through_the_state_machine(flow):
    task, attempt = flow.claimed(priority=5)
    flow.ready(title="lower")
    expire_lease(attempt)

    assert (
        claim_sql.claim(
            agent=flow.agent2,
            project_ids=[flow.project.pk],
            labels=[],
            lease=timedelta(seconds=60),
            now=timezone.now(),
        )
        == claim_sql.OVERDUE
    )
    again = attempts.task_claim(agent=flow.agent2)

    attempt.refresh_from_db()
    assert attempt.state == "abandoned"
    assert (again.task_id, again.number) == (task.pk, 2)


def test_both_paths_answer_the_claim_request_alike(flow, api, monkeypatch):
    done, _ = flow.done(title="done first")
    first, second = twins(flow, labels=["ui", "backend"], depends_on=[done])
    client = api(flow.agent)
    body = {"project": flow.project.slug, "labels": ["ui"], "lease_seconds": 90}

    fast = client.post("/api/v1/tasks/claim/", body, format="json").json()
    orm_only(monkeypatch)
    slow = client.post("/api/v1/tasks/claim/", body, format="json").json()

    volatile_task = {"key", "current_attempt", "created_at", "updated_at"}
    volatile_attempt = {"id", "task", "lease_expires_at", "heartbeat_at", "started_at"}
    assert (fast["task"]["key"], slow["task"]["key"]) == (first.key, second.key)
    assert {k: v for k, v in fast["task"].items() if k not in volatile_task} == {
        k: v for k, v in slow["task"].items() if k not in volatile_task
    }
    assert {k: v for k, v in fast["attempt"].items() if k not in volatile_attempt} == {
        k: v for k, v in slow["attempt"].items() if k not in volatile_attempt
    }
    assert fast["task"]["labels"] == ["backend", "ui"]
    assert fast["task"]["depends_on"] == [done.key]
    assert fast["attempt"]["spec_version"] == {"spec": first.spec.key, "number": 1}
    assert fast["task"]["current_attempt"] == fast["attempt"]["id"]


def prepared_claims() -> int:
    """How many prepared claim statements this database session holds."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
            ["%WITH overdue AS%"],
        )
        return cursor.fetchone()[0]


def test_the_statement_is_prepared_once_per_connection(flow):
    for _ in range(3):
        flow.ready()
        attempts.task_claim(agent=flow.agent)

    assert prepared_claims() == 1


def test_with_prepared_statements_off_the_statement_still_claims(flow, monkeypatch):
    from django.db import connection

    task = flow.ready()
    connection.ensure_connection()
    monkeypatch.setattr(connection.connection, "prepare_threshold", None)  # DATABASE_PREPARE=0
    prepared_before = prepared_claims()

    attempt = attempts.task_claim(agent=flow.agent)

    assert attempt.task_id == task.pk
    assert prepared_claims() == prepared_before


def claimer(api, agent):
    """A claim in FM over the API, with what a process caches for its life already read."""
    ContentType.objects.get_for_model(Attempt)
    ContentType.objects.get_for_model(Task)
    client = api(agent)
    return lambda: client.post("/api/v1/tasks/claim/", {"project": "FM"}, format="json")


def set_project(project, **fields):
    Project.objects.filter(pk=project.pk).update(**fields)


def test_a_claim_over_the_api_is_three_queries_the_token_the_statement_the_outbox(
    flow, api, django_assert_num_queries
):
    flow.ready()

    # The statement reads the project's budget and overlap settings itself; the outbox's
    # one query wakes the live stream and reads the webhook subscriptions; in a test the
    # claim's transaction is a savepoint (SAVEPOINT, RELEASE: two more).
    claim = claimer(api, flow.agent)
    with django_assert_num_queries(3 + 2):
        response = claim()

    assert (response.status_code, response.json()["task"]["project"]) == (201, "FM")


def test_a_claim_in_a_project_with_a_budget_reads_the_months_spend_between_two_statements(
    flow, api, django_assert_num_queries
):
    flow.ready()
    set_project(flow.project, budget_usd=Decimal("100.00"))

    # The token; then in one transaction (in a test a savepoint: two more) the statement,
    # which steps aside with the project's settings, the month's spend, the statement
    # again and the outbox: as many as when the settings were read before the statement.
    claim = claimer(api, flow.agent)
    with django_assert_num_queries(1 + 2 + 1 + 1 + 1 + 1):
        response = claim()

    assert (response.status_code, response.json()["task"]["project"]) == (201, "FM")


def test_a_claim_past_the_budget_is_refused_after_the_months_spend_and_writes_nothing(
    flow, api, django_assert_num_queries
):
    flow.ready()
    set_project(flow.project, budget_usd=Decimal("0.00"))
    events = Event.objects.count()

    # The token; the statement and the month's spend, then the savepoint rolled back.
    claim = claimer(api, flow.agent)
    with django_assert_num_queries(1 + 1 + 1 + 1 + 2):
        response = claim()

    assert (response.status_code, response.json()["code"]) == (409, "budget_exhausted")
    assert (Attempt.objects.count(), Event.objects.count()) == (0, events)


def test_a_claim_in_a_project_that_avoids_overlap_takes_the_state_machine_in_thirteen_queries(
    flow, api, django_assert_num_queries
):
    flow.claimed(allowed_paths=["docs/**"])
    flow.ready(allowed_paths=["docs/**"])
    apart = flow.ready(allowed_paths=["src/**"])
    set_project(flow.project, claim_avoid_overlap=True)

    # The token and the statement (stepping aside, in a savepoint); then the ORM path:
    # overdue leases; in a savepoint the work in progress, the candidates, the lock, the
    # attempt, its event, the task, its event and the outbox; the labels and dependencies
    # for the answer. Thirteen without the test's savepoints.
    claim = claimer(api, flow.agent)
    with django_assert_num_queries(1 + (1 + 2) + 1 + (8 + 2) + 2):
        response = claim()

    assert (response.status_code, response.json()["task"]["key"]) == (201, apart.key)


def test_a_claim_with_a_budget_in_a_project_that_avoids_overlap_adds_only_the_months_spend(
    flow, api, django_assert_num_queries
):
    flow.claimed(allowed_paths=["docs/**"])
    flow.ready(allowed_paths=["docs/**"])
    apart = flow.ready(allowed_paths=["src/**"])
    set_project(flow.project, claim_avoid_overlap=True, budget_usd=Decimal("100.00"))

    claim = claimer(api, flow.agent)
    with django_assert_num_queries(1 + (1 + 2) + 1 + 1 + (8 + 2) + 2):
        response = claim()

    assert (response.status_code, response.json()["task"]["key"]) == (201, apart.key)


@pytest.mark.parametrize("setting", [None, True, False])
@pytest.mark.parametrize(
    "landing", [{"mode": "off"}, {"mode": "push"}, {"mode": "pull_request"}, {}]
)
def test_the_statement_steps_aside_exactly_when_the_project_avoids_overlap(flow, setting, landing):
    flow.ready()
    set_project(flow.project, claim_avoid_overlap=setting, landing=landing)
    flow.project.refresh_from_db()

    claimed = claim_sql.claim(
        agent=flow.agent,
        project_ids=[flow.project.pk],
        labels=[],
        lease=timedelta(seconds=60),
        now=timezone.now(),
    )

    assert isinstance(claimed, claim_sql.Aside) == flow.project.avoids_overlap
    assert Attempt.objects.count() == (0 if flow.project.avoids_overlap else 1)


def test_a_budget_makes_the_statement_step_aside_with_the_projects_settings(flow):
    flow.ready()
    set_project(flow.project, budget_usd=Decimal("12.50"), landing={"mode": "off"})

    aside = claim_sql.claim(
        agent=flow.agent,
        project_ids=[flow.project.pk],
        labels=[],
        lease=timedelta(seconds=60),
        now=timezone.now(),
    )

    assert (aside.overdue, Attempt.objects.count()) == (False, 0)
    [project] = aside.projects
    assert (project.pk, project.slug, project.budget_usd, project.landing) == (
        flow.project.pk,
        "FM",
        Decimal("12.50"),
        {"mode": "off"},
    )
    assert (project.claim_avoid_overlap, project.avoids_overlap) == (None, False)


def test_once_the_budget_is_read_the_statement_claims(flow):
    task = flow.ready()
    set_project(flow.project, budget_usd=Decimal("12.50"))

    attempt = claim_sql.claim(
        agent=flow.agent,
        project_ids=[flow.project.pk],
        labels=[],
        lease=timedelta(seconds=60),
        now=timezone.now(),
        settings_read=True,
    )

    assert attempt.task_id == task.pk


def test_a_claim_names_only_projects_the_tokens_user_is_a_member_of(
    flow, other_flow, api, django_assert_num_queries
):
    other_flow.ready()
    client = api(flow.agent)

    with django_assert_num_queries(1):  # the token: the project is refused from its roles
        response = client.post("/api/v1/tasks/claim/", {"project": "OT"}, format="json")

    assert (response.status_code, response.json()["code"]) == (404, "not_found")
    assert Attempt.objects.count() == 0


def test_a_member_who_is_no_agent_is_refused_the_claim(flow, api):
    flow.ready()

    response = api(flow.reviewer).post("/api/v1/tasks/claim/", {"project": "FM"}, format="json")

    assert (response.status_code, response.json()) == (
        403,
        {
            "detail": "this needs the agent role in the project; you hold it in none of yours",
            "code": "permission_denied",
        },
    )
    assert Attempt.objects.count() == 0
