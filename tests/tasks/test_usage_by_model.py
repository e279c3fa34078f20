"""Usage broken down by model, cache tokens, and the project's price table: what an agent
reported is kept apart from what the table priced, and both count toward the budgets."""

from decimal import Decimal

import pytest
from django.utils import timezone

from oversight.costs import cost_figures
from projects.models import Event, Project
from tasks.models import Attempt, Task
from tests.tasks.test_budgets import heartbeat, snapshot, submit

PRICES = {
    "m-priced": {
        "input": "2",
        "output": "10",
        "cache_read": "0.2",
        "cache_write": "2.5",
        "set_on": "2026-12-01",
    }
}


def set_prices(api, flow, prices=PRICES):
    return api(flow.manager).patch(
        f"/api/v1/projects/{flow.project.slug}/", {"prices": prices}, format="json"
    )


@pytest.mark.django_db
def test_tokens_reported_without_a_cost_are_priced_from_the_projects_table(flow, api):
    assert set_prices(api, flow).status_code == 200
    _, attempt = flow.claimed()
    report = {
        "by_model": {
            "m-priced": {
                "input_tokens": 100_000,
                "output_tokens": 10_000,
                "cache_read_tokens": 1_000_000,
                "cache_write_tokens": 40_000,
            }
        }
    }

    assert heartbeat(api, attempt, usage=report).status_code == 200

    attempt.refresh_from_db()
    assert (attempt.usage["cost_usd"], attempt.usage["priced_cost_usd"]) == ("0.00", "0.60")
    assert attempt.usage["by_model"]["m-priced"] == {
        "input_tokens": 100_000,
        "output_tokens": 10_000,
        "cache_read_tokens": 1_000_000,
        "cache_write_tokens": 40_000,
        "cost_usd": None,
        "priced_cost_usd": "0.60",
    }
    assert (attempt.usage["input_tokens"], attempt.usage["cache_read_tokens"]) == (
        100_000,
        1_000_000,
    )


@pytest.mark.django_db
def test_a_models_reported_cost_replaces_what_was_priced_for_it(flow, api):
    set_prices(api, flow)
    _, attempt = flow.claimed()
    heartbeat(api, attempt, usage={"by_model": {"m-priced": {"input_tokens": 100_000}}})

    later = {"by_model": {"m-priced": {"output_tokens": 5, "cost_usd": "0.31"}}}
    assert heartbeat(api, attempt, usage=later).status_code == 200

    attempt.refresh_from_db()
    assert (attempt.usage["cost_usd"], attempt.usage["priced_cost_usd"]) == ("0.31", "0.00")
    assert attempt.usage["by_model"]["m-priced"]["priced_cost_usd"] == "0.20"  # kept, not counted


@pytest.mark.django_db
def test_a_model_without_a_price_costs_nothing_priced(flow, api):
    set_prices(api, flow)
    _, attempt = flow.claimed()

    heartbeat(api, attempt, usage={"model": "m-other", "input_tokens": 10**6})

    attempt.refresh_from_db()
    assert (attempt.usage["cost_usd"], attempt.usage["priced_cost_usd"]) == ("0.00", "0.00")
    assert attempt.usage["by_model"]["m-other"]["priced_cost_usd"] is None


@pytest.mark.django_db
def test_the_sums_beyond_the_breakdown_are_the_reports_models(flow, api):
    _, attempt = flow.claimed()
    report = {
        "model": "m-a",
        "input_tokens": 30,
        "cost_usd": "0.5",
        "by_model": {"m-b": {"input_tokens": 10, "cost_usd": "0.2"}},
    }

    assert heartbeat(api, attempt, usage=report).status_code == 200

    attempt.refresh_from_db()
    parts = {m: (p["input_tokens"], p["cost_usd"]) for m, p in attempt.usage["by_model"].items()}
    assert parts == {"m-b": (10, "0.20"), "m-a": (20, "0.30")}
    assert attempt.usage["cost_usd"] == "0.50"


@pytest.mark.django_db
def test_a_priced_report_that_reaches_the_tasks_budget_ends_the_attempt(flow, api):
    set_prices(api, flow)
    task, attempt = flow.claimed()
    Task.objects.filter(pk=task.pk).update(budget_usd=Decimal("0.10"))

    response = heartbeat(
        api, attempt, usage={"by_model": {"m-priced": {"input_tokens": 60_000}}}
    )  # 0.12 USD priced

    attempt.refresh_from_db()
    assert response.status_code == 409
    assert response.json()["code"] == "budget_exhausted"
    assert attempt.state == "abandoned"
    assert attempt.usage["priced_cost_usd"] == "0.12"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("usage", "field"),
    [
        ({"by_model": {"m": {"input_tokens": -1}}}, "usage.by_model.m.input_tokens"),
        ({"by_model": {"m": {"cache_read_tokens": 1.5}}}, "usage.by_model.m.cache_read_tokens"),
        ({"by_model": {"m": {"cost_usd": "-0.5"}}}, "usage.by_model.m.cost_usd"),
        ({"by_model": {"m": {"cost_usd": "1e3"}}}, "usage.by_model.m.cost_usd"),
        ({"by_model": {"m": {"cost_usd": "101"}}}, "usage.by_model.m.cost_usd"),
        ({"by_model": {"m": {"tokens": 5}}}, "usage.by_model.m.tokens"),
        ({"by_model": {"m\x00": {"input_tokens": 5}}}, "usage.by_model"),
        ({"by_model": [1]}, "usage.by_model"),
        ({"cache_write_tokens": 10**13}, "usage.cache_write_tokens"),
    ],
)
def test_a_malformed_or_absurd_breakdown_is_refused_and_changes_nothing(flow, api, usage, field):
    _, attempt = flow.claimed()
    before = snapshot()

    response = heartbeat(api, attempt, usage=usage)

    assert response.status_code == 400
    assert field in response.json()["fields"]
    assert snapshot() == before


@pytest.mark.django_db
def test_a_sum_below_its_breakdown_is_raised_to_it(flow, api):
    """A schema cannot say that one figure bounds others, so the API takes the breakdown
    as the finer report rather than refuse what its schema lets pass."""
    _, attempt = flow.claimed()

    response = api(flow.agent).post(
        f"/api/v1/attempts/{attempt.pk}/heartbeat/",
        {"usage": {"input_tokens": 5, "by_model": {"m": {"input_tokens": 9}}}},
        format="json",
    )

    assert response.status_code == 200, response.content
    attempt.refresh_from_db()
    assert attempt.usage["input_tokens"] == 9


@pytest.mark.django_db
def test_the_submit_prices_its_usage_too(flow, api):
    flow.gates({})
    set_prices(api, flow)
    _, attempt = flow.claimed()

    response = submit(api, attempt, usage={"model": "m-priced", "output_tokens": 100_000})

    attempt.refresh_from_db()
    assert response.status_code == 202
    assert attempt.usage["priced_cost_usd"] == "1.00"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("prices", "field"),
    [
        ({"m": {"input": "3"}}, "prices.m.set_on"),
        ({"m": {"input": 3, "set_on": "2026-12-01"}}, "prices.m.input"),
        ({"m": {"input": "-3", "set_on": "2026-12-01"}}, "prices.m.input"),
        ({"m": {"set_on": "2026-12-01"}}, "prices.m"),
        ({"m": {"input": "3", "set_on": "yesterday"}}, "prices.m.set_on"),
        ({"m": {"inputs": "3", "set_on": "2026-12-01"}}, "prices.m.inputs"),
        ({"m\x00": {"input": "3", "set_on": "2026-12-01"}}, "prices.m\\0"),
        ({"m": {"input": "3", "set_on": "20261201"}}, "prices.m.set_on"),
        (["m"], "prices"),
    ],
)
def test_a_malformed_price_table_is_refused_and_nothing_changes(flow, api, prices, field):
    before = (Project.objects.get(pk=flow.project.pk).prices, Event.objects.count())

    response = set_prices(api, flow, prices)

    assert response.status_code == 400
    assert field in response.json()["fields"]
    assert (Project.objects.get(pk=flow.project.pk).prices, Event.objects.count()) == before


@pytest.mark.django_db
def test_a_price_table_is_kept_with_its_date_and_the_edit_recorded(flow, api):
    response = set_prices(api, flow)

    assert response.status_code == 200
    assert response.json()["prices"] == {
        "m-priced": {
            "input": "2",
            "output": "10",
            "cache_read": "0.2",
            "cache_write": "2.5",
            "set_on": "2026-12-01",
        }
    }
    event = Event.objects.filter(transition="edit").latest("pk")
    assert (event.extra["fields"], event.extra["prices"]) == (["prices"], response.json()["prices"])


@pytest.mark.django_db
def test_the_cost_views_say_which_cost_was_reported_and_which_priced(flow, api, client):
    set_prices(api, flow)
    _, attempt = flow.claimed()
    heartbeat(
        api,
        attempt,
        usage={
            "by_model": {
                "m-priced": {"input_tokens": 50_000},
                "m-said": {"input_tokens": 7, "cost_usd": "0.40"},
            }
        },
    )
    attempt = Attempt.objects.get(pk=attempt.pk)

    figures = cost_figures(
        project_ids=[flow.project.pk], start=attempt.started_at, end=timezone.now()
    )
    client.force_login(flow.manager)
    page = client.get("/dashboard/").content.decode()

    rows = {r.name: (r.cost_usd, r.cost_source) for r in figures["models"]}
    assert rows == {
        "m-said": (Decimal("0.400000"), "reported"),
        "m-priced": (Decimal("0.100000"), "priced"),
    }
    assert (figures["total"].reported_cost_usd, figures["total"].priced_cost_usd) == (
        Decimal("0.400000"),
        Decimal("0.100000"),
    )
    assert (
        '<td>m-priced</td><td class="num">1</td><td class="num">$0.10</td><td>priced</td>' in page
    )
    assert "$0.40 reported, $0.10 priced from the price table" in page
