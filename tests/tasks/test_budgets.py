"""Usage reports on heartbeats and submits, and the budgets they use up: a project's per
month (UTC), a task's per attempt."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from events.types import type_of
from projects.errors import Conflict
from projects.models import Event, Project
from tasks import attempts, selectors
from tasks.models import Attempt, Task
from tests.factories import member

USAGE = {"model": "m-large", "input_tokens": 1000, "output_tokens": 200, "cost_usd": "0.25"}


def heartbeat(api, attempt, **body):
    return api(attempt.agent).post(f"/api/v1/attempts/{attempt.pk}/heartbeat/", body, format="json")


def submit(api, attempt, key="k-1", **body):
    return api(attempt.agent).post(
        f"/api/v1/attempts/{attempt.pk}/submit/",
        {"summary": "done", **body},
        format="json",
        HTTP_IDEMPOTENCY_KEY=key,
    )


NO_CACHE = {"cache_read_tokens": 0, "cache_write_tokens": 0, "priced_cost_usd": None}


def snapshot():
    """Everything a refusal must leave as it was."""
    return (
        list(Attempt.objects.order_by("pk").values()),
        list(Task.objects.order_by("pk").values()),
        Event.objects.count(),
    )


def set_budget(project, amount):
    Project.objects.filter(pk=project.pk).update(budget_usd=Decimal(amount))
    project.refresh_from_db()


# --- Usage ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_usage_is_summed_over_two_heartbeats_and_the_submit(flow, api):
    flow.gates({})
    _, attempt = flow.claimed()

    assert heartbeat(api, attempt, usage=USAGE).status_code == 200
    second = {"model": "m-small", "input_tokens": 50, "cost_usd": 0.1, "wall_seconds": 30}
    assert heartbeat(api, attempt, lease_seconds=120, usage=second).status_code == 200
    assert submit(api, attempt, usage={"output_tokens": 5, "wall_seconds": 2.5}).status_code == 202

    attempt.refresh_from_db()
    assert attempt.usage == {
        "model": "m-small",
        "models": ["m-large", "m-small"],
        "input_tokens": 1050,
        "output_tokens": 205,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "cost_usd": "0.35",
        "priced_cost_usd": "0.00",
        "wall_seconds": 32.5,
        "by_model": {
            "m-large": {**NO_CACHE, "input_tokens": 1000, "output_tokens": 200, "cost_usd": "0.25"},
            "m-small": {**NO_CACHE, "input_tokens": 50, "output_tokens": 5, "cost_usd": "0.10"},
        },
    }
    shown = api(flow.reviewer).get(f"/api/v1/attempts/{attempt.pk}/").json()["usage"]
    assert shown == {**attempt.usage, "self_reported": True, "voided": None}


@pytest.mark.django_db
def test_an_attempt_without_reports_shows_empty_self_reported_usage(flow, api):
    _, attempt = flow.claimed()

    shown = api(flow.agent).get(f"/api/v1/attempts/{attempt.pk}/").json()["usage"]

    assert shown == {
        "model": None,
        "models": [],
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "cost_usd": "0.00",
        "priced_cost_usd": "0.00",
        "wall_seconds": 0.0,
        "by_model": {},
        "self_reported": True,
        "voided": None,
    }


@pytest.mark.django_db
def test_a_repeated_submit_with_the_same_key_does_not_count_its_usage_twice(flow, api):
    flow.gates({})
    _, attempt = flow.claimed()
    report = {"input_tokens": 10, "cost_usd": "1.5"}

    first = submit(api, attempt, key="same", usage=report)
    again = submit(api, attempt, key="same", usage=report)

    assert (first.status_code, again.status_code) == (202, 202)
    assert first.json() == again.json()
    attempt.refresh_from_db()
    assert (attempt.usage["input_tokens"], attempt.usage["cost_usd"]) == (10, "1.50")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("usage", "field"),
    [
        ({"input_tokens": -1}, "usage.input_tokens"),
        ({"input_tokens": 1.5}, "usage.input_tokens"),
        ({"output_tokens": "12"}, "usage.output_tokens"),
        ({"output_tokens": True}, "usage.output_tokens"),
        ({"cost_usd": "-0.10"}, "usage.cost_usd"),
        ({"cost_usd": "1e3"}, "usage.cost_usd"),
        ({"cost_usd": "lots"}, "usage.cost_usd"),
        ({"cost_usd": "٣"}, "usage.cost_usd"),
        ({"wall_seconds": -3}, "usage.wall_seconds"),
        ({"wall_seconds": "60"}, "usage.wall_seconds"),
        ({"model": ""}, "usage.model"),
        ({"model": "x" * 101}, "usage.model"),
        ({"model": 7}, "usage.model"),
        ({"tokens": 5}, "usage.tokens"),
        ([1, 2], "usage"),
    ],
)
def test_malformed_usage_is_400_naming_the_field_and_changes_nothing(flow, api, usage, field):
    _, attempt = flow.claimed()
    before = snapshot()

    response = heartbeat(
        api,
        attempt,
        lease_seconds=900,
        usage={**USAGE, **usage} if isinstance(usage, dict) else usage,
    )

    assert response.status_code == 400
    assert response.json()["code"] == "invalid"
    assert list(response.json()["fields"]) == [field]
    assert snapshot() == before  # not even the lease moved


@pytest.mark.django_db
def test_a_malformed_usage_on_the_submit_changes_nothing(flow, api):
    _, attempt = flow.claimed()
    before = snapshot()

    response = submit(api, attempt, usage={"cost_usd": -1})

    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["usage.cost_usd"]
    assert snapshot() == before


@pytest.mark.django_db
def test_usage_cannot_be_charged_to_another_agents_attempt_or_a_lost_lease(flow, api):
    # An agent that would exhaust a rival's budget, or report after it let go: neither adds.
    _, attempt = flow.claimed()
    _, released = flow.claimed(title="let go", agent=flow.agent2)
    attempts.attempt_release(attempt=released, actor=flow.agent2, reason="done with it")
    before = snapshot()

    by_a_stranger = api(flow.agent2).post(
        f"/api/v1/attempts/{attempt.pk}/heartbeat/", {"usage": USAGE}, format="json"
    )
    after_its_lease = heartbeat(api, released, usage=USAGE)

    assert (by_a_stranger.status_code, by_a_stranger.json()["code"]) == (403, "not_lease_holder")
    assert (after_its_lease.status_code, after_its_lease.json()["code"]) == (409, "lease_lost")
    assert snapshot() == before


# --- The project's budget -------------------------------------------------------------------


@pytest.mark.django_db
def test_a_claim_past_the_projects_budget_is_409_and_changes_nothing(flow, api):
    set_budget(flow.project, "1.00")
    _, attempt = flow.claimed()
    heartbeat(api, attempt, usage={"cost_usd": "0.60"})
    heartbeat(api, attempt, usage={"cost_usd": "0.40"})
    waiting = flow.ready(title="next")
    before = snapshot()

    response = api(flow.agent2).post("/api/v1/tasks/claim/", {"project": "FM"}, format="json")

    assert response.status_code == 409
    month = timezone.now().strftime("%Y-%m")
    assert response.json() == {
        "code": "budget_exhausted",
        "detail": f"project FM has spent 1.00 USD of its 1.00 USD budget for {month}"
        " (self-reported by its agents); no new work starts until next month, or until a"
        " manager raises the budget",
        "spent_usd": "1.00",
        "budget_usd": "1.00",
        "project": "FM",
    }
    assert snapshot() == before
    waiting.refresh_from_db()
    assert (waiting.state, waiting.current_attempt_id) == ("ready", None)


@pytest.mark.django_db
def test_a_claim_below_the_budget_or_with_a_raised_one_goes_ahead(flow, api):
    set_budget(flow.project, "1.00")
    _, attempt = flow.claimed()
    heartbeat(api, attempt, usage={"cost_usd": "0.99"})
    flow.ready(title="next")

    assert attempts.task_claim(agent=flow.agent2) is not None
    flow.ready(title="after")
    heartbeat(api, attempt, usage={"cost_usd": "0.01"})
    with pytest.raises(Conflict):
        attempts.task_claim(agent=flow.agent2)
    response = api(flow.manager).patch("/api/v1/projects/FM/", {"budget_usd": 5}, format="json")
    assert (response.status_code, response.json()["budget_usd"]) == (200, "5.00")
    assert attempts.task_claim(agent=flow.agent2) is not None


@pytest.mark.django_db
def test_a_claim_across_projects_skips_the_one_past_its_budget(flow, other_flow):
    set_budget(flow.project, "0")
    other_flow.ready(title="elsewhere")
    flow.ready(title="here", priority=9)
    both = flow.agent
    member(other_flow.project, "agent", both.username)

    attempt = attempts.task_claim(agent=both)

    assert attempt.task.project_id == other_flow.project.pk


@pytest.mark.django_db
def test_last_months_spend_does_not_count_this_month(flow, api, monkeypatch):
    set_budget(flow.project, "1.00")
    _, attempt = flow.claimed()
    heartbeat(api, attempt, usage={"cost_usd": "5"})
    now = datetime(2026, 12, 1, 0, 0, 5, tzinfo=UTC)
    Attempt.objects.filter(pk=attempt.pk).update(started_at=now - timedelta(seconds=10))
    flow.ready(title="december")
    monkeypatch.setattr(timezone, "now", lambda: now)

    assert selectors.month_spend(project_ids=[flow.project.pk], now=now) == {}
    assert attempts.task_claim(agent=flow.agent2).task.title == "december"
    november = now - timedelta(seconds=6)
    assert selectors.month_spend(project_ids=[flow.project.pk], now=november) == {
        flow.project.pk: Decimal("5")
    }


@pytest.mark.django_db
def test_without_a_budget_the_claim_never_sums_the_spend(flow, monkeypatch):
    flow.ready()

    def refuse(**kwargs):
        raise AssertionError("the spend was summed")

    monkeypatch.setattr(selectors, "month_spend", refuse)

    assert attempts.task_claim(agent=flow.agent) is not None


@pytest.mark.django_db
def test_the_project_event_is_written_once_when_the_spend_crosses_the_budget(flow, api):
    set_budget(flow.project, "1.00")
    _, attempt = flow.claimed()

    heartbeat(api, attempt, usage={"cost_usd": "0.50"})
    heartbeat(api, attempt, usage={"cost_usd": "0.75"})
    heartbeat(api, attempt, usage={"cost_usd": "0.75"})

    [event] = Event.objects.filter(transition="exhaust_budget")
    assert (event.object_key, event.actor, event.task_id) == ("FM", None, None)
    assert event.extra == {
        "scope": "project",
        "spent_usd": "1.25",
        "budget_usd": "1.00",
        "month": timezone.now().strftime("%Y-%m"),
        "task": attempt.task.key,
        "attempt": 1,
    }
    assert type_of("projects.project", event.transition, event.to_state) == "budget.exhausted"


# --- The task's budget ----------------------------------------------------------------------


@pytest.mark.django_db
def test_a_heartbeat_past_the_tasks_budget_ends_the_attempt_like_a_lost_lease(flow, api):
    task, attempt = flow.claimed(budget_usd="2.00")
    heartbeat(api, attempt, usage={"cost_usd": "1.50"})

    response = heartbeat(api, attempt, usage={"cost_usd": "0.75", "input_tokens": 9})

    reason = (
        "budget exhausted: this attempt's self-reported cost 2.25 USD reached the task's"
        " budget of 2.00 USD"
    )
    assert response.status_code == 409
    assert response.json() == {
        "code": "budget_exhausted",
        "detail": f"{reason}; the attempt has ended and the task was given back",
        "spent_usd": "2.25",
        "budget_usd": "2.00",
    }
    attempt.refresh_from_db()
    task.refresh_from_db()
    assert (attempt.state, attempt.end_reason, attempt.usage["input_tokens"]) == (
        "abandoned",
        reason,
        9,
    )
    assert (task.state, task.current_attempt_id, task.failed_attempts) == ("ready", None, 1)
    ended = Event.objects.get(transition="exhaust_budget", to_state="abandoned")
    assert ended.extra == {"scope": "task", "spent_usd": "2.25", "budget_usd": "2.00"}
    assert type_of("tasks.attempt", "exhaust_budget", "abandoned") == "budget.exhausted"
    again = heartbeat(api, attempt)
    assert (again.status_code, again.json()["code"]) == (409, "lease_lost")
    context = api(flow.agent2).post("/api/v1/tasks/claim/", {}, format="json")
    bundle = api(flow.agent2).get(f"/api/v1/tasks/{task.key}/context/").json()
    assert context.status_code == 201
    assert bundle["attempts"][0]["ended_because"] == reason


@pytest.mark.django_db
def test_the_last_attempt_past_the_tasks_budget_fails_the_task(flow, api):
    task, attempt = flow.claimed(budget_usd="1", max_attempts=1)

    response = heartbeat(api, attempt, usage={"cost_usd": 1})

    task.refresh_from_db()
    assert (response.status_code, task.state, task.failed_attempts) == (409, "failed", 1)
    event = Event.objects.get(transition="exhaust_budget", to_state="failed")
    assert type_of("tasks.task", event.transition, event.to_state) == "task.failed"


@pytest.mark.django_db
def test_a_submit_past_the_tasks_budget_is_accepted(flow, api):
    flow.gates({})
    _, attempt = flow.claimed(budget_usd="1")

    response = submit(api, attempt, usage={"cost_usd": "3"})

    attempt.refresh_from_db()
    assert (response.status_code, attempt.state, attempt.usage["cost_usd"]) == (
        202,
        "checking",
        "3.00",
    )


# --- Setting budgets ------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("value", [-1, "-1", "ten", "1e3", True, "12345678901", {"usd": 1}])
def test_a_bad_project_budget_is_400_naming_it_and_changes_nothing(flow, api, value):
    before = list(Project.objects.values())
    events = Event.objects.count()

    response = api(flow.manager).patch("/api/v1/projects/FM/", {"budget_usd": value}, format="json")

    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["budget_usd"]
    assert (list(Project.objects.values()), Event.objects.count()) == (before, events)


@pytest.mark.django_db
def test_a_manager_sets_and_clears_the_projects_budget(flow, api):
    manager = api(flow.manager)

    set_to = manager.patch("/api/v1/projects/FM/", {"budget_usd": "250.5"}, format="json")
    cleared = manager.patch("/api/v1/projects/FM/", {"budget_usd": None}, format="json")

    assert (set_to.json()["budget_usd"], cleared.json()["budget_usd"]) == ("250.50", None)
    edits = Event.objects.filter(transition="edit", object_key="FM").order_by("pk")
    assert [e.extra for e in edits] == [
        {"fields": ["budget_usd"], "budget_usd": "250.50"},
        {"fields": ["budget_usd"], "budget_usd": None},
    ]


@pytest.mark.django_db
def test_an_agent_cannot_set_the_projects_budget(flow, api):
    response = api(flow.agent).patch("/api/v1/projects/FM/", {"budget_usd": 1}, format="json")

    assert response.status_code == 403
    assert Project.objects.get(slug="FM").budget_usd is None


@pytest.mark.django_db
def test_a_task_budget_is_set_on_create_and_update(flow, api):
    manager = api(flow.manager)

    created = manager.post(
        "/api/v1/tasks/", {"project": "FM", "title": "t", "budget_usd": 3}, format="json"
    )
    key = created.json()["key"]
    updated = manager.patch(f"/api/v1/tasks/{key}/", {"budget_usd": "0.5"}, format="json")
    refused = manager.patch(f"/api/v1/tasks/{key}/", {"budget_usd": "-2"}, format="json")

    assert (created.json()["budget_usd"], updated.json()["budget_usd"]) == ("3.00", "0.50")
    assert (refused.status_code, list(refused.json()["fields"])) == (400, ["budget_usd"])
    assert Task.objects.get(key=key).budget_usd == Decimal("0.50")
