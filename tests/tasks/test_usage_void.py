"""One usage report may cost at most the operator's bound (``FACTORY_USAGE_MAX_REPORT_USD``),
and a manager may void what an attempt reported (``POST /api/v1/attempts/{id}/usage/void/``):
kept on the attempt, counted toward no budget and no cost view (ADR 0021)."""

from decimal import Decimal

import pytest
from django.utils import timezone

from oversight.costs import cost_figures
from projects.models import Event, Project
from tasks import selectors
from tasks.models import Attempt, Task
from tests.factories import member

BIG = {"model": "m-large", "input_tokens": 5000, "output_tokens": 700, "cost_usd": "60"}


def heartbeat(api, attempt, **body):
    return api(attempt.agent).post(f"/api/v1/attempts/{attempt.pk}/heartbeat/", body, format="json")


def void(api, user, attempt, body=None):
    return api(user).post(
        f"/api/v1/attempts/{attempt.pk}/usage/void/",
        {"reason": "the agent's meter counted the whole account"} if body is None else body,
        format="json",
    )


def claim(api, user):
    return api(user).post("/api/v1/tasks/claim/", {"project": "FM"}, format="json")


def snapshot():
    """Everything a refusal must leave as it was."""
    return (
        list(Attempt.objects.order_by("pk").values()),
        list(Task.objects.order_by("pk").values()),
        list(Project.objects.order_by("pk").values()),
        Event.objects.count(),
    )


def set_budget(project, amount):
    Project.objects.filter(pk=project.pk).update(budget_usd=Decimal(amount))


# --- The bound on one report ---------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("cost", ["999999", 100.01, "100.0000001", "0100.5", 999_999])
def test_a_heartbeat_above_the_bound_is_400_naming_it_and_changes_nothing(flow, api, cost):
    _, attempt = flow.claimed()
    before = snapshot()

    response = heartbeat(api, attempt, lease_seconds=900, usage={**BIG, "cost_usd": cost})

    assert response.status_code == 400
    body = response.json()
    assert (body["code"], list(body["fields"])) == ("invalid", ["usage.cost_usd"])
    assert body["detail"].startswith(
        "usage.cost_usd: one report may cost at most 100 USD (FACTORY_USAGE_MAX_REPORT_USD,"
        " set by the site's operator), not "
    )
    assert snapshot() == before  # not the usage, not the lease, no event


@pytest.mark.django_db
def test_a_submit_above_the_bound_is_400_and_the_attempt_stays_running(flow, api):
    flow.gates({})
    _, attempt = flow.claimed()
    before = snapshot()

    response = api(flow.agent).post(
        f"/api/v1/attempts/{attempt.pk}/submit/",
        {"summary": "done", "usage": {"cost_usd": "250"}},
        format="json",
        HTTP_IDEMPOTENCY_KEY="k-1",
    )

    assert (response.status_code, list(response.json()["fields"])) == (400, ["usage.cost_usd"])
    assert snapshot() == before
    attempt.refresh_from_db()
    assert (attempt.state, attempt.usage) == ("running", {})


@pytest.mark.django_db
@pytest.mark.parametrize("cost", [100, "100", "100.000", "0100", 99.999999])
def test_a_report_up_to_the_bound_is_taken(flow, api, cost):
    _, attempt = flow.claimed()

    response = heartbeat(api, attempt, usage={"cost_usd": cost})

    assert response.status_code == 200
    attempt.refresh_from_db()
    assert Decimal(attempt.usage["cost_usd"]) == Decimal(str(cost))


@pytest.mark.django_db
def test_the_bound_is_the_operators_setting(flow, api, settings):
    settings.FACTORY_USAGE_MAX_REPORT_USD = 5
    _, attempt = flow.claimed()

    refused = heartbeat(api, attempt, usage={"cost_usd": "5.01"})
    taken = heartbeat(api, attempt, usage={"cost_usd": "5"})

    assert refused.status_code == 400
    assert "at most 5 USD" in refused.json()["detail"]
    assert "not 5.01" in refused.json()["detail"]
    assert taken.status_code == 200


@pytest.mark.django_db
def test_many_reports_below_the_bound_still_end_the_attempt_at_its_tasks_budget(flow, api):
    _, attempt = flow.claimed(budget_usd="150")
    assert heartbeat(api, attempt, usage={"cost_usd": "100"}).status_code == 200

    response = heartbeat(api, attempt, usage={"cost_usd": "60"})

    assert (response.status_code, response.json()["code"]) == (409, "budget_exhausted")
    attempt.refresh_from_db()
    assert (attempt.state, attempt.usage["cost_usd"]) == ("abandoned", "160.00")


# --- Voiding an attempt's usage ------------------------------------------------------------


@pytest.mark.django_db
def test_a_managers_void_lets_the_next_claim_through_at_once(flow, api):
    set_budget(flow.project, "50")
    _, attempt = flow.claimed()
    heartbeat(api, attempt, usage=BIG)
    flow.ready(title="next")
    assert claim(api, flow.agent2).json()["code"] == "budget_exhausted"

    voided = void(api, flow.manager, attempt)

    assert voided.status_code == 200
    assert voided.json()["usage"]["cost_usd"] == "0.00"
    assert selectors.month_spend(project_ids=[flow.project.pk], now=timezone.now()) == {
        flow.project.pk: Decimal(0)
    }
    claimed = claim(api, flow.agent2)
    assert (claimed.status_code, claimed.json()["task"]["title"]) == (201, "next")


@pytest.mark.django_db
def test_the_void_writes_one_event_with_who_why_and_what(flow, api):
    _, attempt = flow.claimed()
    heartbeat(api, attempt, usage=BIG)
    reported = Attempt.objects.get(pk=attempt.pk).usage

    void(api, flow.manager, attempt, {"reason": "  the meter counted the whole account  "})

    [event] = Event.objects.filter(transition="void_usage")
    assert (event.object_key, event.actor, event.from_state, event.to_state) == (
        f"{attempt.task.key}#1",
        flow.manager,
        "counted",
        "voided",
    )
    assert event.reason == "the meter counted the whole account"
    assert event.extra == {"usage": reported, "month": timezone.now().strftime("%Y-%m")}
    assert event.task_id == attempt.task_id


@pytest.mark.django_db
def test_the_voided_attempt_keeps_what_was_reported_and_shows_the_void(flow, api):
    _, attempt = flow.claimed()
    heartbeat(api, attempt, usage=BIG)
    reported = Attempt.objects.get(pk=attempt.pk).usage

    void(api, flow.manager, attempt)

    usage = api(flow.reviewer).get(f"/api/v1/attempts/{attempt.pk}/").json()["usage"]
    stored = Attempt.objects.get(pk=attempt.pk)
    assert (stored.usage_state, stored.usage) == ("voided", {})
    assert usage["cost_usd"] == "0.00"
    assert usage["voided"] == {
        "by": "fm-manager",
        "at": stored.usage_voided["at"],
        "reason": "the agent's meter counted the whole account",
        "usage": {**reported, "self_reported": True},
    }
    assert reported["cost_usd"] == "60.00"


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["holder", "agent2", "reviewer", "verifier"])
def test_only_a_manager_may_void_and_a_refusal_changes_nothing(flow, api, role):
    _, attempt = flow.claimed()
    heartbeat(api, attempt, usage=BIG)
    caller = {
        "holder": flow.agent,
        "agent2": flow.agent2,
        "reviewer": flow.reviewer,
        "verifier": flow.verifier,
    }[role]
    before = snapshot()

    response = void(api, caller, attempt)

    assert (response.status_code, response.json()["code"]) == (403, "permission_denied")
    assert response.json()["detail"] == "this needs the manager role in the project"
    assert snapshot() == before


@pytest.mark.django_db
def test_another_projects_manager_gets_404_and_nothing_changes(flow, other_flow, api):
    _, attempt = flow.claimed()
    heartbeat(api, attempt, usage=BIG)
    before = snapshot()

    response = void(api, other_flow.manager, attempt)

    assert (response.status_code, response.json()["code"]) == (404, "not_found")
    assert snapshot() == before


@pytest.mark.django_db
def test_a_refusal_for_the_role_comes_before_what_the_body_says(flow, api):
    _, attempt = flow.claimed()
    heartbeat(api, attempt, usage=BIG)
    before = snapshot()

    response = void(api, flow.agent, attempt, {"reason": ["not text"], "extra": 1})

    assert response.status_code == 403
    assert snapshot() == before


@pytest.mark.django_db
@pytest.mark.parametrize("body", [{}, {"reason": ""}, {"reason": "   "}])
def test_a_void_needs_a_reason(flow, api, body):
    _, attempt = flow.claimed()
    heartbeat(api, attempt, usage=BIG)
    before = snapshot()

    response = void(api, flow.manager, attempt, body)

    assert (response.status_code, list(response.json()["fields"])) == (400, ["reason"])
    assert snapshot() == before


@pytest.mark.django_db
def test_voiding_twice_is_409_and_changes_nothing(flow, api):
    _, attempt = flow.claimed()
    heartbeat(api, attempt, usage=BIG)
    void(api, flow.manager, attempt)
    before = snapshot()

    response = void(api, flow.manager, attempt, {"reason": "again"})

    assert (response.status_code, response.json()["code"]) == (409, "invalid_state")
    assert snapshot() == before


@pytest.mark.django_db
def test_voiding_an_attempt_that_reported_nothing_is_409(flow, api):
    _, attempt = flow.claimed()
    before = snapshot()

    response = void(api, flow.manager, attempt)

    assert (response.status_code, response.json()["code"]) == (409, "nothing_to_void")
    assert snapshot() == before


@pytest.mark.django_db
def test_what_a_running_attempt_reports_after_the_void_counts_again(flow, api):
    _, attempt = flow.claimed(budget_usd="61")
    heartbeat(api, attempt, usage=BIG)
    void(api, flow.manager, attempt)

    again = heartbeat(api, attempt, usage={"cost_usd": "2.5", "input_tokens": 10})

    assert again.status_code == 200  # the task's budget counts from the void: 2.50 of 61
    attempt.refresh_from_db()
    assert (attempt.usage["cost_usd"], attempt.usage["input_tokens"]) == ("2.50", 10)
    assert attempt.usage_voided["usage"]["cost_usd"] == "60.00"
    assert selectors.month_spend(project_ids=[flow.project.pk], now=timezone.now()) == {
        flow.project.pk: Decimal("2.5")
    }


@pytest.mark.django_db
def test_a_voided_cost_leaves_the_cost_views(flow, api):
    _, attempt = flow.claimed()
    heartbeat(api, attempt, usage=BIG)
    now = timezone.now()

    void(api, flow.manager, attempt)

    figures = cost_figures(project_ids=[flow.project.pk], start=now.replace(year=2000), end=now)
    assert (figures["total"].cost_usd, figures["total"].input_tokens) == (Decimal(0), 0)
    assert (figures["total"].attempts, figures["reported"]) == (1, 0)
    costs = api(flow.manager).get("/api/v1/projects/FM/costs/").json()
    assert costs["total"]["cost_usd"] == "0.000000"


@pytest.mark.django_db
def test_a_superuser_may_void_without_a_membership(flow, api):
    _, attempt = flow.claimed()
    heartbeat(api, attempt, usage=BIG)
    admin = member(flow.project, "reviewer", "root")
    type(admin).objects.filter(pk=admin.pk).update(is_superuser=True)
    admin.refresh_from_db()
    admin.memberships.all().delete()

    response = void(api, admin, attempt)

    assert response.status_code == 200
    assert response.json()["usage"]["voided"]["by"] == "root"


@pytest.mark.django_db
def test_the_task_page_shows_the_usage_and_its_void(flow, api, client):
    task, attempt = flow.claimed()
    heartbeat(api, attempt, usage=BIG)
    void(api, flow.manager, attempt, {"reason": "meter <b>bug</b>"})
    heartbeat(api, attempt, usage={"cost_usd": "1.25"})
    client.force_login(flow.reviewer)

    page = client.get(f"/tasks/{task.key}/").content.decode()

    assert "$1.25 self-reported" in page
    assert "Voided by fm-manager" in page
    assert "meter &lt;b&gt;bug&lt;/b&gt;" in page
    assert "$60.00 reported until then" in page


@pytest.mark.django_db
def test_after_a_void_the_next_crossing_of_the_projects_budget_writes_a_new_event(flow, api):
    set_budget(flow.project, "50")
    _, attempt = flow.claimed()
    heartbeat(api, attempt, usage=BIG)
    void(api, flow.manager, attempt)

    heartbeat(api, attempt, usage={"cost_usd": "30"})
    heartbeat(api, attempt, usage={"cost_usd": "30"})

    crossings = Event.objects.filter(transition="exhaust_budget").order_by("pk")
    assert [event.extra["spent_usd"] for event in crossings] == ["60.00", "60.00"]
