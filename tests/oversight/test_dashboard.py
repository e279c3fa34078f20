"""The manager dashboard: its figures from real history, its SVG charts, and its page."""

from datetime import UTC, datetime, timedelta

import django.utils.timezone
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from evidence.models import GateRunState
from evidence.services import gate_run_finish, gate_run_start, gate_runs_create
from oversight.dashboard import bar_chart, dashboard_context, hbar_chart, percentile
from projects.roles import Role
from tasks import attempts, review
from tests.factories import member

PASSED, FAILED, ERROR = GateRunState.PASSED, GateRunState.FAILED, GateRunState.ERROR
# Monday 3 March 2025, 09:00 UTC: the start of ISO week 2025-W10.
W10 = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)


class Clock(datetime):
    """Stands in for ``datetime`` inside ``django.utils.timezone``: ``now()`` is ``Clock.at``."""

    at = W10

    @classmethod
    def now(cls, tz=None):
        return cls.at.astimezone(tz) if tz else cls.at.replace(tzinfo=None)


@pytest.fixture
def clock(monkeypatch):
    """Stops the clock at W10 so history lands in chosen weeks; set ``clock.at`` to move it.

    Events are append-only, so history in earlier weeks is written at those moments,
    through the real services, rather than back-dated afterwards.
    """
    monkeypatch.setattr(django.utils.timezone, "datetime", Clock)
    monkeypatch.setattr(Clock, "at", W10)
    return Clock


@pytest.fixture
def flow(flow):
    flow.gates({})  # submissions go straight to review; gate runs are made by hand
    return flow


def claim_again(flow, task):
    """The agent claims ``task`` again and submits; it is in review again."""
    attempt = attempts.task_claim(agent=flow.agent, project=flow.project)
    assert attempt.task_id == task.pk
    attempts.attempt_submit(attempt=attempt, actor=flow.agent, summary="again", change={})
    attempts.attempt_gates_passed(attempt=attempt)
    task.refresh_from_db()
    return task


def approve(flow, task):
    return review.task_approve(task=task, actor=flow.reviewer)


def finished_run(attempt, gate, outcome):
    (run,) = gate_runs_create(attempt=attempt, policy={gate: {}})
    run = gate_run_start(run=run)
    return gate_run_finish(run=run, outcome=outcome, verdict={}, summary=outcome)


@pytest.mark.django_db
def test_throughput_counts_approvals_per_iso_week(flow, clock):
    flow.done()
    flow.done()
    clock.at = W10 + timedelta(weeks=2, days=2)
    flow.done()
    task, _ = flow.in_review()
    review.task_reject(task=task, actor=flow.reviewer, reason="no tests")

    figures = dashboard_context(
        project_ids=[flow.project.pk], weeks=4, now=W10 + timedelta(weeks=2, days=4)
    )

    assert [(w.label, w.iso, w.approved) for w in figures["weeks"]] == [
        ("W09", "2025-W09", 0),
        ("W10", "2025-W10", 2),
        ("W11", "2025-W11", 0),
        ("W12", "2025-W12", 1),
    ]
    assert figures["approved"] == 3
    assert figures["span"] == "2025-W09 to 2025-W12"
    assert (
        'aria-label="Tasks approved per week, 2025-W09 to 2025-W12: W09 0; W10 2; W11 0; W12 1"'
        in figures["charts"]["throughput"]
    )


@pytest.mark.django_db
def test_the_window_ends_at_now_and_starts_on_a_monday(flow, clock):
    flow.done()  # W10, Monday 09:00
    clock.at = W10 + timedelta(weeks=1)
    flow.done()  # W11, Monday 09:00

    two_weeks = dashboard_context(project_ids=[flow.project.pk], weeks=2, now=clock.at)
    one_week = dashboard_context(project_ids=[flow.project.pk], weeks=1, now=clock.at)
    before = dashboard_context(project_ids=[flow.project.pk], weeks=2, now=W10)

    assert [w.approved for w in two_weeks["weeks"]] == [1, 1]
    assert one_week["window_start"] == datetime(2025, 3, 10, tzinfo=UTC)
    assert [w.approved for w in one_week["weeks"]] == [1]
    assert [w.approved for w in before["weeks"]] == [0, 1]


@pytest.mark.django_db
def test_first_pass_yield_counts_approvals_without_a_failed_or_rejected_attempt(flow, clock):
    flow.done()  # approved first time
    released, attempt = flow.claimed()
    attempts.attempt_release(attempt=attempt, actor=flow.agent, reason="end of shift")
    approve(flow, claim_again(flow, released))  # released reached no verdict: still first pass
    rejected, _ = flow.in_review()
    review.task_reject(task=rejected, actor=flow.reviewer, reason="no tests")
    approve(flow, claim_again(flow, rejected))
    gated, attempt = flow.checking()
    attempts.attempt_gates_failed(attempt=attempt, reason="tests-pass: 1 failed")
    approve(flow, claim_again(flow, gated))

    figures = dashboard_context(project_ids=[flow.project.pk], weeks=2, now=W10 + timedelta(days=1))

    assert (figures["approved"], figures["first_pass"]) == (4, 2)
    assert figures["first_pass_pct"] == 50.0
    assert figures["first_pass_text"] == "50% (2 of 4)"
    assert [w.first_pass_pct for w in figures["weeks"]] == [None, 50.0]
    assert (
        "<title>2025-W10 (from 03 Mar): 50% (2 of 4)</title>"
        in figures["charts"]["first_pass_yield"]
    )
    assert (
        "<title>2025-W09 (from 24 Feb): no approvals</title>"
        in figures["charts"]["first_pass_yield"]
    )


@pytest.mark.django_db
def test_gate_failure_rate_is_failed_or_error_of_finished_runs_per_gate(flow, clock):
    (_, old), (_, a1), (_, a2), (_, a3) = (flow.checking() for _ in range(4))
    finished_run(old, "tests-pass", FAILED)  # W10: before the window
    clock.at = W10 + timedelta(weeks=1)
    for attempt, outcome in [(a1, PASSED), (a2, FAILED), (a3, ERROR)]:
        finished_run(attempt, "tests-pass", outcome)
    for attempt, outcome in [(a1, PASSED), (a2, PASSED), (a3, FAILED)]:
        finished_run(attempt, "coverage", outcome)
    gate_run_start(run=gate_runs_create(attempt=a1, policy={"diff-scope": {}})[0])  # running

    figures = dashboard_context(project_ids=[flow.project.pk], weeks=1, now=clock.at)

    assert [(g["gate"], g["failed"], g["finished"], g["text"]) for g in figures["gates"]] == [
        ("tests-pass", 2, 3, "67% (2 of 3)"),
        ("coverage", 1, 3, "33% (1 of 3)"),
    ]
    assert (figures["gate_failed"], figures["gate_finished"]) == (3, 6)
    assert figures["gate_failure_text"] == "50% (3 of 6)"
    chart = figures["charts"]["gate_failure"]
    assert chart.count('class="bar bad"') == 2
    assert "<title>tests-pass: 67% (2 of 3)</title>" in chart


@pytest.mark.django_db
def test_review_latency_runs_from_gates_passed_to_the_verdict(flow, clock):
    tasks = [flow.in_review()[0] for _ in range(3)]
    clock.at = W10 + timedelta(hours=1)
    approve(flow, tasks[0])
    clock.at = W10 + timedelta(hours=3)
    review.task_reject(task=tasks[1], actor=flow.reviewer, reason="no tests")
    clock.at = W10 + timedelta(hours=5)
    approve(flow, tasks[2])

    figures = dashboard_context(project_ids=[flow.project.pk], weeks=2, now=clock.at)

    assert figures["reviews"] == 3
    assert (figures["latency_p50"], figures["latency_p90"]) == (3 * 3600, 5 * 3600)
    assert figures["latency_text"] == "p50 3.0 h · p90 5.0 h"
    assert [w.latency_p50 for w in figures["weeks"]] == [None, 3 * 3600]
    assert figures["latency_unit"] == "h"
    assert (
        "<title>2025-W10 (from 03 Mar): 3.0 h over 3 reviews</title>"
        in figures["charts"]["review_latency"]
    )


@pytest.mark.django_db
def test_short_review_latency_is_drawn_in_minutes(flow, clock):
    task, _ = flow.in_review()
    clock.at = W10 + timedelta(minutes=20)
    approve(flow, task)

    figures = dashboard_context(project_ids=[flow.project.pk], weeks=1, now=clock.at)

    assert figures["latency_unit"] == "min"
    assert figures["latency_text"] == "p50 20 min · p90 20 min"
    assert ">20 min</text>" in figures["charts"]["review_latency"]


@pytest.mark.django_db
def test_an_empty_project_draws_no_data_yet(flow):
    figures = dashboard_context(project_ids=[flow.project.pk])

    assert len(figures["weeks"]) == 12
    assert (figures["approved"], figures["reviews"], figures["gate_finished"]) == (0, 0, 0)
    assert figures["first_pass_text"] == figures["gate_failure_text"] == "no data yet"
    assert figures["latency_text"] == "no data yet"
    for chart in figures["charts"].values():
        assert ">no data yet</text>" in chart
        assert "<rect" not in chart
    assert dashboard_context(project_ids=[])["approved"] == 0


@pytest.mark.django_db
def test_the_gate_chart_escapes_a_hostile_gate_name(flow):
    _, attempt = flow.checking()
    finished_run(attempt, "<script>x</script>", FAILED)

    chart = dashboard_context(project_ids=[flow.project.pk])["charts"]["gate_failure"]

    assert "&lt;script&gt;x&lt;/script&gt;" in chart
    assert "<script" not in chart
    assert 'aria-label="Gate failure rate by gate, ' in chart


def test_bar_chart_draws_a_bar_per_point_with_hover_text_and_no_inline_style():
    chart = bar_chart([("W01", 2), ("W02", 1), ("W03", None)], unit="h", title="Latency")

    assert chart.startswith(
        '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 600 220" role="img"'
    )
    assert 'aria-label="Latency: W01 2 h; W02 1 h; W03 no data"' in chart
    assert chart.count('<rect class="bar"') == 2
    assert 'height="176"><title>W01: 2 h</title>' in chart  # the largest bar is full height
    assert 'height="88"><title>W02: 1 h</title>' in chart
    assert '<rect class="bar none"' in chart
    assert "style=" not in chart
    assert "<script" not in chart


def test_a_free_scale_reaches_at_least_one_unit():
    chart = bar_chart([("W01", 0.5)], unit="h")

    assert 'height="88"><title>W01: 0.5 h</title>' in chart  # half of 176, not full height


def test_hbar_chart_cuts_long_labels_and_escapes_them():
    long_name = "a-very-long-gate-name-that-goes-on & on"

    chart = hbar_chart([(long_name, 25.0)], unit="%", max_value=100, title="Gates")

    assert (
        "<title>a-very-long-gate-name-that-goes-on &amp; on</title>a-very-long-gate-name-t…"
        in chart
    )
    assert 'width="77.5"' in chart  # a quarter of the 310 units of bar room
    assert ">25%</text>" in chart


def test_charts_without_data_never_divide_by_zero():
    assert ">no data yet</text>" in bar_chart([], title="Empty")
    assert ">no data yet</text>" in bar_chart([("W01", 0), ("W02", 0)], title="Zero")
    assert ">no data yet</text>" in hbar_chart([], title="Empty")
    assert '<rect class="bar"' in bar_chart([("W01", 0)], unit="%", max_value=100)


def test_percentiles_are_nearest_rank():
    assert percentile([], 50) is None
    assert percentile([7], 90) == 7
    assert percentile([4, 1, 3, 2], 50) == 2
    assert percentile(list(range(1, 11)), 90) == 9
    assert percentile(list(range(1, 11)), 50) == 5


@pytest.mark.django_db
def test_dashboard_context_reads_with_two_queries_and_writes_nothing(flow):
    flow.done()

    with CaptureQueriesContext(connection) as captured:
        dashboard_context(project_ids=[flow.project.pk])

    assert len(captured) == 2
    assert all(q["sql"].lstrip().upper().startswith("SELECT") for q in captured.captured_queries)


@pytest.mark.django_db
def test_the_page_answers_a_manager_with_the_same_queries_for_1_or_50_tasks(
    flow, client, django_assert_max_num_queries
):
    client.force_login(flow.manager)
    flow.done()
    with CaptureQueriesContext(connection) as one:
        response = client.get("/dashboard/")
    for _ in range(49):
        flow.done()

    with django_assert_max_num_queries(15), CaptureQueriesContext(connection) as many:
        response = client.get("/dashboard/")

    assert response.status_code == 200
    assert response.context["approved"] == 50
    assert len(many) == len(one)
    assert b"100% (50 of 50)" in response.content


@pytest.mark.django_db
def test_the_page_renders_the_four_stats_and_charts(flow, client):
    client.force_login(flow.manager)
    flow.done()

    response = client.get("/dashboard/")

    page = response.content.decode()
    assert response.status_code == 200
    assert "<h1>Dashboard</h1>" in page
    assert '<div class="stat">100% (1 of 1)</div>' in page
    assert page.count('role="img"') == 4
    assert 'href="/dashboard/"' in page  # the manager's nav link
    assert "style=" not in page


@pytest.mark.django_db
def test_the_project_filter_shows_only_that_projects_figures(flow, other_flow, client):
    other_flow.gates({})
    manager = member(other_flow.project, Role.MANAGER, flow.manager.username)
    flow.done()
    flow.done()
    other_flow.done()
    client.force_login(manager)

    everything = client.get("/dashboard/")
    only_ot = client.get("/dashboard/", {"project": "OT"})

    assert everything.context["approved"] == 3
    assert only_ot.context["approved"] == 1
    assert '<option value="OT" selected>' in only_ot.content.decode()


@pytest.mark.django_db
def test_an_agent_reads_the_figures_of_their_own_projects(flow, other_flow, client):
    other_flow.gates({})
    flow.done()
    other_flow.done()
    other_flow.done()
    client.force_login(flow.agent)

    response = client.get("/dashboard/")

    assert response.status_code == 200
    assert response.context["approved"] == 1
    assert [p.slug for p in response.context["projects"]] == ["FM"]
    assert b'href="/dashboard/"' not in response.content  # the nav link is for managers
