"""What the work costs and what works: the self-reported usage summed per task, spec, agent
and model, the cost per approved and landed task, and the first-pass rate; the dashboard's
costs panel and ``GET /api/v1/projects/{slug}/costs/``."""

import copy
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from evidence.models import GateRunState
from evidence.services import gate_run_finish, gate_run_requeue, gate_run_start, gate_runs_create
from oversight.costs import cost_figures
from projects.roles import Role
from tasks import attempts, review
from tasks.models import Attempt, Task
from tests.conftest import world_for_the_module
from tests.factories import Flow, ProjectFactory, all_met, member

D = Decimal


def report(attempt, **usage):
    """What the attempt's agent reported (the heartbeat and the submit write it)."""
    Attempt.objects.filter(pk=attempt.pk).update(usage=usage)


def through_gates(attempt, *, outcome=GateRunState.PASSED, tries=1):
    """One gate run, started ``tries`` times (re-run after a lost worker), then finished."""
    (run,) = gate_runs_create(attempt=attempt, policy={"tests-pass": {}})
    run = gate_run_start(run=run)
    for _ in range(tries - 1):
        run = gate_run_start(run=gate_run_requeue(run=run, reason="worker lost"))
    gate_run_finish(run=run, outcome=outcome, verdict={}, summary=outcome)
    attempts.attempt_checks_conclude(attempt=attempt)
    attempt.refresh_from_db()
    return attempt


def claim_and_submit(flow, agent):
    attempt = attempts.task_claim(agent=agent, project=flow.project)
    return attempts.attempt_submit(attempt=attempt, actor=agent, summary="s", change={})


def approve(flow, task, attempt):
    task.refresh_from_db()
    return review.task_approve(task=task, actor=flow.reviewer, criteria=all_met(attempt))


def build_history():
    """Five attempts in FM by two agents on three models, one in another project.

    FM-1: ada's first try approved (m-a, $0.50), its gate passed at its first run.
    FM-2: ada's try rejected (m-a, $0.25); alan's approved (m-b, $1.10) after its gate re-ran.
    FM-3: alan's try failed by its gate, nothing reported.
    FM-4: ada's try in review, its cost not a number (m-a, "a lot").
    """
    flow, other_flow = Flow(ProjectFactory(slug="FM")), Flow(ProjectFactory(slug="OT"))
    flow.gates({})
    other_flow.gates({})
    ada, alan = flow.agent, flow.agent2
    spec = flow.spec()
    t1, a1 = flow.checking(spec=spec)
    approve(flow, t1, through_gates(a1))
    report(a1, model="m-a", cost_usd="0.50", input_tokens=1000, output_tokens=200, wall_seconds=30)
    t2, a2 = flow.checking(spec=spec, agent=ada)
    through_gates(a2)
    t2.refresh_from_db()
    review.task_reject(task=t2, actor=flow.reviewer, reason="no tests")
    report(a2, model="m-a", cost_usd="0.25", input_tokens=500, output_tokens=100)
    b2 = through_gates(claim_and_submit(flow, alan), tries=2)
    approve(flow, t2, b2)
    report(
        b2, model="m-b", cost_usd="1.10", input_tokens=3000, output_tokens=700, wall_seconds=90.5
    )
    _, b3 = flow.checking(agent=alan, max_attempts=1)
    through_gates(b3, outcome=GateRunState.FAILED)
    _, a4 = flow.checking(agent=ada)
    through_gates(a4)
    report(a4, model="m-a", cost_usd="a lot", input_tokens=-5)
    _, elsewhere = other_flow.checking()
    report(elsewhere, model="m-a", cost_usd="9.00")
    return {"flow": flow, "other_flow": other_flow, "t1": t1, "t2": t2, "spec": spec}


@pytest.fixture(scope="module")
def _history(django_db_setup, django_db_blocker):
    # The history holds no evidence files: each test keeps its own media folder.
    with world_for_the_module(django_db_blocker, build_history) as history:
        yield history


@pytest.fixture
def history(db, _history):
    """The history, built once for the module; each test is rolled back to it."""
    return copy.deepcopy(_history)


@pytest.fixture
def flow(history):
    return history["flow"]


def figures(flow):
    now = timezone.now()
    return cost_figures(project_ids=[flow.project.pk], start=now - timedelta(days=1), end=now)


def rows(groups):
    return [
        (g.name, g.attempts, g.cost_usd, g.input_tokens, g.output_tokens, g.reviewed, g.first_pass)
        for g in groups
    ]


@pytest.mark.django_db
def test_costs_are_summed_per_agent_and_model_with_missing_usage_as_zero(flow, history):
    result = figures(flow)

    total = result["total"]
    assert (total.attempts, total.cost_usd, total.input_tokens, total.output_tokens) == (
        5,
        D("1.850000"),
        4500,
        1000,
    )
    assert total.wall_seconds == D("120.500000")
    assert result["reported"] == 4  # FM-3 reported nothing
    assert result["self_reported"] is True
    assert rows(result["agents"]) == [
        ("fm-agent2", 2, D("1.100000"), 3000, 700, 1, 0),
        ("fm-agent", 3, D("0.750000"), 1500, 300, 2, 1),
    ]
    assert rows(result["models"]) == [
        ("m-b", 1, D("1.100000"), 3000, 700, 1, 0),
        ("m-a", 3, D("0.750000"), 1500, 300, 2, 1),
        ("unknown model", 1, D("0.000000"), 0, 0, 0, 0),
    ]


@pytest.mark.django_db
def test_first_pass_rate_is_approved_at_first_gate_run_of_reviewed_attempts(flow, history):
    result = figures(flow)

    rates = {w.name: w.first_pass_rate for w in result["agents"] + result["models"]}
    # ada: FM-1 approved at its gate's first run, FM-2 rejected; FM-4 not yet judged.
    assert rates["fm-agent"] == 0.5
    # alan: FM-2 approved after its gate re-ran; FM-3 failed its gate, never reviewed.
    assert rates["fm-agent2"] == 0.0
    assert rates["m-a"] == 0.5
    assert rates["unknown model"] is None


@pytest.mark.django_db
def test_costs_per_task_spec_approved_and_landed_task(flow, history):
    Task.objects.filter(pk=history["t1"].pk).update(landed_commit="c0ffee")

    result = figures(flow)

    assert [(t.key, t.attempts, t.cost_usd, t.spec) for t in result["tasks"]] == [
        ("FM-2", 2, D("1.350000"), history["spec"].key),
        ("FM-1", 1, D("0.500000"), history["spec"].key),
        ("FM-3", 1, D("0.000000"), None),
        ("FM-4", 1, D("0.000000"), None),
    ]
    assert [(s.key, s.tasks, s.attempts, s.cost_usd) for s in result["specs"]] == [
        (history["spec"].key, 2, 3, D("1.850000")),
        (None, 2, 2, D("0.000000")),
    ]
    assert (result["approved_tasks"], result["cost_per_approved_task"]) == (2, D("0.925000"))
    assert (result["landed_tasks"], result["cost_per_landed_task"]) == (1, D("1.850000"))


@pytest.mark.django_db
def test_nothing_reported_is_zero_not_an_error(flow):
    Attempt.objects.update(usage={})

    result = figures(flow)

    assert result["total"].cost_usd == D("0.000000")
    assert result["reported"] == 0
    assert result["cost_per_approved_task"] == D("0.000000")
    assert rows(result["models"]) == [("unknown model", 5, D("0.000000"), 0, 0, 3, 1)]


@pytest.mark.django_db
def test_no_attempts_in_the_window_is_no_figure(flow):
    now = timezone.now()
    result = cost_figures(project_ids=[flow.project.pk], start=now, end=now)

    assert (result["total"].attempts, result["total"].cost_usd) == (0, D("0.000000"))
    assert result["cost_per_approved_task"] is None
    assert result["cost_per_landed_task"] is None
    assert result["agents"] == result["models"] == result["specs"] == result["tasks"] == []


@pytest.mark.django_db
def test_attempts_outside_the_window_are_left_out(flow, history):
    Attempt.objects.filter(task=history["t1"]).update(started_at=timezone.now() - timedelta(days=3))

    result = figures(flow)

    assert result["total"].cost_usd == D("1.350000")
    assert [t.key for t in result["tasks"]] == ["FM-2", "FM-3", "FM-4"]


@pytest.mark.django_db
def test_the_figures_take_five_queries_for_one_attempt_or_many(
    flow, history, django_assert_num_queries
):
    with django_assert_num_queries(5):
        figures(flow)
    for _ in range(5):
        _, attempt = flow.checking()
        report(attempt, model="m-c", cost_usd="1")

    with django_assert_num_queries(5):
        result = figures(flow)

    assert result["total"].cost_usd == D("6.850000")


# --- The dashboard's panel ------------------------------------------------------------------


@pytest.mark.django_db
def test_the_dashboard_shows_a_manager_the_self_reported_costs(flow, client):
    client.force_login(flow.manager)

    response = client.get("/dashboard/")

    page = response.content.decode()
    assert response.status_code == 200
    assert response.context["costs"]["total"].cost_usd == D("1.850000")
    assert "What it cost" in page
    assert "self-reported by the agents" in page
    assert '<div class="stat">$1.85</div>' in page
    assert '<div class="stat">$0.93</div>' in page  # per approved task: 1.85 / 2
    assert "<td>fm-agent</td>" in page and "50% (1 of 2)" in page
    assert "<td>unknown model</td>" in page
    assert "style=" not in page


@pytest.mark.django_db
def test_a_hostile_self_reported_model_name_is_shown_as_text(flow, client):
    Attempt.objects.filter(task__key="FM-3").update(usage={"model": "<script>x</script>"})
    client.force_login(flow.manager)

    page = client.get("/dashboard/").content.decode()

    assert "<td>&lt;script&gt;x&lt;/script&gt;</td>" in page
    assert "<script>x" not in page


@pytest.mark.django_db
def test_the_dashboard_shows_no_costs_to_a_reviewer_or_an_agent(flow, client):
    for user in (flow.reviewer, flow.agent):
        client.force_login(user)

        response = client.get("/dashboard/")

        assert response.status_code == 200
        assert response.context["costs"] is None
        assert "What it cost" not in response.content.decode()


@pytest.mark.django_db
def test_the_dashboard_costs_only_the_projects_the_user_manages(flow, history, client):
    outsider_manager = history["other_flow"].manager
    member(flow.project, Role.REVIEWER, outsider_manager.username)
    client.force_login(outsider_manager)

    response = client.get("/dashboard/")

    assert response.context["costs"]["total"].cost_usd == D("9.000000")  # OT's attempt only


@pytest.mark.django_db
def test_the_dashboard_costs_take_the_same_queries_for_few_or_many_attempts(
    flow, client, django_assert_max_num_queries
):
    client.force_login(flow.manager)
    with CaptureQueriesContext(connection) as few:
        client.get("/dashboard/")
    for _ in range(5):
        _, attempt = flow.checking(agent=flow.agent2)
        report(attempt, model="m-c", cost_usd="1")

    with django_assert_max_num_queries(len(few)), CaptureQueriesContext(connection) as many:
        response = client.get("/dashboard/")

    assert len(many) == len(few)
    assert response.context["costs"]["total"].cost_usd == D("6.850000")


# --- The API ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_api_answers_a_manager_the_figures_as_decimal_strings(flow, api):
    response = api(flow.manager).get("/api/v1/projects/FM/costs/")

    body = response.json()
    assert response.status_code == 200
    assert body["self_reported"] is True
    assert (body["project"], body["weeks"]) == ("FM", 12)
    assert body["total"] == {
        "attempts": 5,
        "cost_usd": "1.850000",
        "reported_cost_usd": "1.850000",
        "priced_cost_usd": "0.000000",
        "cost_source": "reported",
        "input_tokens": 4500,
        "output_tokens": 1000,
        "wall_seconds": "120.500000",
    }
    assert (body["approved_tasks"], body["cost_per_approved_task"]) == (2, "0.925000")
    assert (body["landed_tasks"], body["cost_per_landed_task"]) == (0, None)
    assert [
        (a["agent"], a["cost_usd"], a["reviewed"], a["first_pass"], a["first_pass_rate"])
        for a in body["agents"]
    ] == [
        ("fm-agent2", "1.100000", 1, 0, 0.0),
        ("fm-agent", "0.750000", 2, 1, 0.5),
    ]
    assert [m["model"] for m in body["models"]] == ["m-b", "m-a", "unknown model"]
    assert [(s["spec"], s["tasks"]) for s in body["specs"]] == [("FM-S1", 2), (None, 2)]
    assert [t["task"] for t in body["tasks"]] == ["FM-2", "FM-1", "FM-3", "FM-4"]
    assert body["tasks_total"] == 4


@pytest.mark.django_db
def test_the_api_counts_the_weeks_asked_for(flow, api):
    Attempt.objects.filter(task=flow.project.tasks.get(number=1)).update(
        started_at=timezone.now() - timedelta(weeks=2)
    )

    one_week = api(flow.manager).get("/api/v1/projects/FM/costs/", {"weeks": "1"}).json()
    three_weeks = api(flow.manager).get("/api/v1/projects/FM/costs/", {"weeks": "3"}).json()

    assert one_week["total"]["cost_usd"] == "1.350000"
    assert three_weeks["total"]["cost_usd"] == "1.850000"


@pytest.mark.django_db
@pytest.mark.parametrize("weeks", ["0", "-1", "1.5", "521", "x"])
def test_the_api_refuses_a_window_that_is_not_1_to_520_weeks(flow, api, weeks):
    response = api(flow.manager).get("/api/v1/projects/FM/costs/", {"weeks": weeks})

    assert response.status_code == 400
    assert response.json()["code"] == "invalid"
    assert "weeks" in response.json()["fields"]


@pytest.mark.django_db
def test_the_api_refuses_members_who_do_not_manage_and_hides_the_project_from_others(
    flow, history, api
):
    for user in (flow.reviewer, flow.agent, flow.verifier):
        response = api(user).get("/api/v1/projects/FM/costs/")
        assert (response.status_code, response.json()["code"]) == (403, "permission_denied")
    response = api(history["other_flow"].manager).get("/api/v1/projects/FM/costs/")
    assert response.status_code == 404


@pytest.mark.django_db
def test_the_api_takes_the_same_queries_for_few_or_many_attempts(flow, api):
    client = api(flow.manager)
    with CaptureQueriesContext(connection) as few:
        client.get("/api/v1/projects/FM/costs/")
    for _ in range(5):
        _, attempt = flow.checking()
        report(attempt, model="m-c", cost_usd="1")

    with CaptureQueriesContext(connection) as many:
        response = client.get("/api/v1/projects/FM/costs/")

    assert response.json()["total"]["cost_usd"] == "6.850000"
    assert len(many) == len(few)
