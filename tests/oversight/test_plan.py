"""The plan: the graph of unfinished work, its cycles, the critical path, the forecast,
the API that answers it and the page that draws it."""

import tracemalloc
from datetime import UTC, date, datetime, timedelta

import django.utils.timezone
import pytest

from oversight import plan as plan_module
from oversight.api import PlanSerializer
from oversight.plan import (
    DEFAULT_HOURS,
    Completion,
    PlanTask,
    Weights,
    build_plan,
    daily_completions,
    default_seed,
    forecast,
    key_order,
)
from projects.models import Event
from tasks import review

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
TODAY = date(2025, 3, 3)
NO_HISTORY = Weights([])


def done_in(hours: float, *labels: str) -> Completion:
    return Completion(labels, T0, T0 + timedelta(hours=hours))


def plan(tasks, links=(), weights=NO_HISTORY, **kwargs):
    return build_plan(tasks, links, weights, **kwargs)


def node(result, key):
    return next(n for n in result["nodes"] if n["key"] == key)


# --- The graph and the critical path -------------------------------------------------------------


def test_the_critical_path_is_the_chain_with_the_most_hours_by_label():
    weights = Weights([done_in(1, "docs"), done_in(3, "docs"), done_in(10, "backend")])
    tasks = [
        PlanTask("FM-1", "schema", "ready", ("backend",)),
        PlanTask("FM-2", "api", "ready", ("backend",)),
        PlanTask("FM-3", "guide", "ready", ("docs",)),
        PlanTask("FM-4", "page", "draft"),
        PlanTask("FM-5", "release notes", "ready", ("docs",)),
    ]
    links = [("FM-2", "FM-1", "ready"), ("FM-4", "FM-3", "ready"), ("FM-5", "FM-4", "draft")]

    result = plan(tasks, links, weights)

    assert result["critical_path"]["keys"] == ["FM-1", "FM-2"]
    assert result["critical_path"]["hours"] == 20.0
    assert [(n["key"], n["weight_hours"], n["weight_basis"]) for n in result["nodes"]] == [
        ("FM-1", 10.0, "label backend: median of 1"),
        ("FM-2", 10.0, "label backend: median of 1"),
        ("FM-3", 2.0, "label docs: median of 2"),
        ("FM-4", 3.0, "project: median of 3"),
        ("FM-5", 2.0, "label docs: median of 2"),
    ]


def test_a_task_weighs_its_slowest_label_and_ties_go_to_the_first_label_by_name():
    weights = Weights([done_in(2, "api"), done_in(5, "ui"), done_in(5, "db")])

    assert weights.of(["api", "ui", "db"]) == (5 * 3600, "label db: median of 1")
    assert weights.of(["api", "unknown"]) == (2 * 3600, "label api: median of 1")
    assert weights.of(["unknown"]) == (5 * 3600, "project: median of 3")


def test_without_any_history_every_task_weighs_the_documented_default():
    tasks = [PlanTask("FM-1", "a", "ready"), PlanTask("FM-2", "b", "ready")]

    result = plan(tasks, [("FM-2", "FM-1", "ready")])

    assert DEFAULT_HOURS == 4.0
    assert [n["weight_hours"] for n in result["nodes"]] == [4.0, 4.0]
    assert {n["weight_basis"] for n in result["nodes"]} == {"default: no history"}
    assert result["critical_path"] == {
        "keys": ["FM-1", "FM-2"],
        "hours": 8.0,
        "weights": "no task here has gone from its first attempt to done yet: each open task"
        " weighs the default 4.0 h",
        "default_hours": 4.0,
    }


def test_a_completion_without_an_attempt_is_no_history():
    weights = Weights([Completion(("api",), None, T0), done_in(-1, "api")])

    assert weights.of(["api"]) == (4 * 3600, "default: no history")


def test_equal_chains_tie_to_the_one_first_in_key_order():
    # Three chains of two equal tasks; FM-2's comes first in key order (FM-2 < FM-10).
    tasks = [PlanTask(f"FM-{n}", str(n), "ready") for n in (2, 3, 10, 11, 20, 21)]
    links = [("FM-11", "FM-10", "ready"), ("FM-3", "FM-2", "ready"), ("FM-21", "FM-20", "ready")]

    result = plan(tasks, links)

    assert result["critical_path"]["keys"] == ["FM-2", "FM-3"]
    assert plan(tasks[::-1], links[::-1])["critical_path"]["keys"] == ["FM-2", "FM-3"]


def test_a_fork_ties_to_the_branch_first_in_key_order():
    tasks = [PlanTask(f"FM-{n}", str(n), "ready") for n in (1, 2, 3)]

    result = plan(tasks, [("FM-3", "FM-1", "ready"), ("FM-2", "FM-1", "ready")])

    assert result["critical_path"]["keys"] == ["FM-1", "FM-2"]


def chain_of(n: int) -> tuple[list, list]:
    tasks = [PlanTask(f"FM-{i}", "step", "ready") for i in range(1, n + 1)]
    return tasks, [(f"FM-{i + 1}", f"FM-{i}", "ready") for i in range(1, n)]


def peak_bytes(n: int) -> int:
    """The most memory ``build_plan`` holds at once for a chain of ``n`` tasks."""
    tasks, links = chain_of(n)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        result = plan(tasks, links)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert len(result["critical_path"]["keys"]) == n
    return peak


def test_a_chain_four_times_longer_takes_about_four_times_the_memory_to_plan():
    # A manager (or an import) can chain thousands of tasks; every member may ask for the
    # plan. Holding each step's whole remaining chain made memory grow with the square of
    # the length: 8,000 tasks held half a gigabyte.
    small, large = peak_bytes(1500), peak_bytes(6000)

    assert large < 6 * small


def test_the_critical_path_of_a_long_chain_is_the_whole_chain_in_order():
    tasks, links = chain_of(3000)

    result = plan(tasks[::-1], links[::-1])

    assert result["critical_path"]["keys"] == [t.key for t in tasks]
    assert result["critical_path"]["hours"] == 3000 * DEFAULT_HOURS


def test_done_and_cancelled_tasks_are_left_out_and_block_nothing():
    tasks = [
        PlanTask("FM-1", "done", "done"),
        PlanTask("FM-2", "waits on done", "ready"),
        PlanTask("FM-3", "cancelled", "cancelled"),
        PlanTask("FM-4", "waits on cancelled", "ready"),
    ]
    links = [("FM-2", "FM-1", "done"), ("FM-4", "FM-3", "cancelled")]

    result = plan(tasks, links)

    assert [n["key"] for n in result["nodes"]] == ["FM-2", "FM-4"]
    assert result["edges"] == []
    assert node(result, "FM-2")["blocked_by"] == []
    # A cancelled dependency is never done: the task cannot be claimed, and says why.
    assert node(result, "FM-4")["blocked_by"] == ["FM-3"]
    assert result["critical_path"]["keys"] == ["FM-2"]


def test_edges_point_from_the_dependency_to_the_task_that_waits_for_it():
    tasks = [PlanTask("FM-1", "first", "claimed"), PlanTask("FM-2", "second", "ready")]

    result = plan(tasks, [("FM-2", "FM-1", "claimed")])

    assert result["edges"] == [{"from": "FM-1", "to": "FM-2"}]
    assert node(result, "FM-2")["blocked_by"] == ["FM-1"]
    assert node(result, "FM-1")["blocked_by"] == []


def test_a_cycle_is_named_marked_and_counted_as_one_step_of_the_path():
    tasks = [PlanTask(f"FM-{n}", str(n), "ready") for n in (1, 2, 3, 4, 5)]
    links = [
        ("FM-3", "FM-2", "ready"),
        ("FM-2", "FM-3", "ready"),  # FM-2 and FM-3 wait on each other
        ("FM-2", "FM-1", "ready"),
        ("FM-4", "FM-3", "ready"),
        ("FM-5", "FM-5", "ready"),  # waits on itself
    ]

    result = plan(tasks, links)

    assert result["cycles"] == [["FM-2", "FM-3"], ["FM-5"]]
    assert [n["key"] for n in result["nodes"] if n["in_cycle"]] == ["FM-2", "FM-3", "FM-5"]
    assert result["critical_path"]["keys"] == ["FM-1", "FM-2", "FM-3", "FM-4"]
    assert result["critical_path"]["hours"] == 16.0


def test_a_spec_shows_its_done_tasks_and_the_unfinished_ones_it_waits_on():
    tasks = [
        PlanTask("FM-1", "upstream", "ready"),
        PlanTask("FM-2", "further up", "claimed"),
        PlanTask("FM-3", "spec, done", "done", spec="FM-S1"),
        PlanTask("FM-4", "spec, open", "ready", spec="FM-S1"),
        PlanTask("FM-5", "elsewhere", "ready"),
    ]
    links = [("FM-4", "FM-1", "ready"), ("FM-1", "FM-2", "claimed"), ("FM-4", "FM-3", "done")]

    result = plan(tasks, links, spec="FM-S1")

    assert [(n["key"], n["weight_hours"]) for n in result["nodes"]] == [
        ("FM-1", 4.0),
        ("FM-2", 4.0),
        ("FM-3", None),
        ("FM-4", 4.0),
    ]
    assert result["edges"] == [
        {"from": "FM-1", "to": "FM-4"},
        {"from": "FM-2", "to": "FM-1"},
        {"from": "FM-3", "to": "FM-4"},
    ]
    assert result["critical_path"]["keys"] == ["FM-2", "FM-1", "FM-4"]
    assert node(result, "FM-3")["weight_basis"] == "finished"


def test_keys_sort_by_number():
    assert sorted(["FM-10", "FM-9", "AB-100"], key=key_order) == ["AB-100", "FM-9", "FM-10"]


# --- The forecast --------------------------------------------------------------------------------


def test_a_steady_pace_gives_exact_dates_whatever_the_seed():
    daily = [2] * 30

    for seed in (1, 2, 99):
        result = forecast(daily=daily, open_count=11, today=TODAY, seed=seed, trials=200)
        assert (result["p50"], result["p85"]) == ("2025-03-09", "2025-03-09")
        assert (result["p50_days"], result["p85_days"]) == (6, 6)


def test_a_fixed_seed_gives_the_same_dates_every_time():
    daily = [0] * 20 + [1, 0, 3, 0, 0, 2, 1, 0, 4, 1]

    first = forecast(daily=daily, open_count=10, today=TODAY, seed=7)
    again = forecast(daily=daily, open_count=10, today=TODAY, seed=7)

    assert first == again
    assert first == {
        "p50": "2025-03-28",
        "p85": "2025-04-12",
        "p50_days": 25,
        "p85_days": 40,
        "open": 10,
        "samples_days": 30,
        "completed_in_window": 12,
        "trials": 1000,
        "seed": 7,
        "horizon_days": 1095,
        "basis": "12 tasks reached done in the last 30 days (on 6 of them); 1000 trials"
        " drawing each day from those 30",
        "reason": None,
    }


def test_no_completions_in_the_window_means_no_dates():
    result = forecast(daily=[0] * 30, open_count=5, today=TODAY, seed=1)

    assert (result["p50"], result["p85"], result["trials"]) == (None, None, 0)
    assert result["reason"] == "no completions in the last 30 days"
    assert result["completed_in_window"] == 0


def test_nothing_open_is_done_today():
    result = forecast(daily=[1] * 30, open_count=0, today=TODAY, seed=1)

    assert (result["p50"], result["p85"], result["reason"]) == (
        "2025-03-03",
        "2025-03-03",
        "nothing is open",
    )


def test_work_beyond_the_horizon_has_no_dates_and_says_so():
    daily = [0] * 29 + [1]

    result = forecast(daily=daily, open_count=500, today=TODAY, seed=1, horizon_days=365)

    assert (result["p50"], result["p85"], result["trials"]) == (None, None, 0)
    assert (
        result["reason"] == "at 1 completion in 30 days, 500 open tasks take longer than 365 days"
    )


def test_the_window_counts_the_last_30_days_by_utc_date_zero_days_included():
    done = [
        datetime(2025, 3, 3, 23, 59, tzinfo=UTC),
        datetime(2025, 3, 3, 0, 0, tzinfo=UTC),
        datetime(2025, 2, 2, 0, 0, tzinfo=UTC),  # the first day of the window
        datetime(2025, 2, 1, 23, 59, tzinfo=UTC),  # the day before: left out
    ]

    counts = daily_completions(done, TODAY)

    assert len(counts) == 30
    assert (counts[0], counts[-1], sum(counts)) == (1, 2, 3)


# --- Loading, the API and the page ----------------------------------------------------------------


class Clock(datetime):
    """Stands in for ``datetime`` inside ``django.utils.timezone``: ``now()`` is ``Clock.at``."""

    at = T0

    @classmethod
    def now(cls, tz=None):
        return cls.at.astimezone(tz) if tz else cls.at.replace(tzinfo=None)


@pytest.fixture
def clock(monkeypatch):
    """History is written through the services at chosen moments (events are append-only)."""
    monkeypatch.setattr(django.utils.timezone, "datetime", Clock)
    monkeypatch.setattr(Clock, "at", T0)
    return Clock


@pytest.fixture
def flow(flow):
    flow.gates({})  # submissions go straight to review
    return flow


def finished(flow, clock, hours, **kwargs):
    """A task claimed now and approved ``hours`` later; the clock is left there."""
    task, _ = flow.in_review(**kwargs)
    clock.at += timedelta(hours=hours)
    return review.task_approve(task=task, actor=flow.reviewer, criteria=[])


def chain(flow, n, **kwargs):
    """``n`` ready tasks, each waiting on the one before."""
    tasks = []
    for i in range(n):
        tasks.append(flow.ready(title=f"step {i + 1}", depends_on=tasks[-1:], **kwargs))
    return tasks


@pytest.mark.django_db
def test_the_api_answers_the_plan_from_the_projects_history(flow, api, clock):
    finished(flow, clock, 2, labels=["api"])
    finished(flow, clock, 6, labels=["ui"])
    first = flow.ready(title="endpoint", labels=["api"])
    second = flow.ready(title="page", labels=["ui"], depends_on=[first])
    loose = flow.draft(title="notes")

    response = api(flow.reviewer).get("/api/v1/projects/FM/plan/?seed=3")

    assert response.status_code == 200
    body = response.json()
    assert PlanSerializer(body).data == body  # the schema describes the answer
    assert [(n["key"], n["weight_hours"], n["blocked_by"]) for n in body["nodes"]] == [
        (first.key, 2.0, []),
        (second.key, 6.0, [first.key]),
        (loose.key, 4.0, []),  # no label: the project's median of 2 h and 6 h
    ]
    assert node(body, second.key)["url"] == f"/tasks/{second.key}/"
    assert body["edges"] == [{"from": first.key, "to": second.key}]
    assert body["critical_path"]["keys"] == [first.key, second.key]
    assert body["critical_path"]["hours"] == 8.0
    # Two completions, both on 3 March (today): 2 a day on 1 of 30 days.
    assert body["forecast"]["completed_in_window"] == 2
    assert (body["forecast"]["open"], body["forecast"]["seed"]) == (3, 3)
    assert body["forecast"]["p50"] is not None


@pytest.mark.django_db
def test_the_api_narrows_to_a_spec_with_its_done_tasks(flow, api, clock):
    spec = flow.spec(criteria=[])
    done = finished(flow, clock, 1, spec=spec)
    waiting = flow.ready(title="spec work", spec=spec, depends_on=[done])
    flow.ready(title="other work")

    body = api(flow.agent).get(f"/api/v1/projects/FM/plan/?spec={spec.key}").json()

    assert body["spec"] == spec.key
    assert [(n["key"], n["state"]) for n in body["nodes"]] == [
        (done.key, "done"),
        (waiting.key, "ready"),
    ]
    assert body["forecast"]["open"] == 1


@pytest.mark.django_db
def test_an_unknown_or_foreign_spec_is_a_404_with_a_reason(flow, other_flow, api):
    foreign = other_flow.spec(criteria=[])
    client = api(flow.manager)
    events = Event.objects.count()

    unknown = client.get("/api/v1/projects/FM/plan/?spec=FM-S9")
    elsewhere = client.get(f"/api/v1/projects/FM/plan/?spec={foreign.key}")
    outsider = api(other_flow.manager).get("/api/v1/projects/FM/plan/")

    assert (unknown.status_code, unknown.json()) == (
        404,
        {"detail": "no spec FM-S9 in FM", "code": "not_found"},
    )
    assert (elsewhere.status_code, elsewhere.json()["detail"]) == (
        404,
        f"no spec {foreign.key} in FM",
    )
    assert (outsider.status_code, outsider.json()["code"]) == (404, "not_found")
    assert Event.objects.count() == events


@pytest.mark.django_db
def test_a_bad_seed_is_a_400_naming_it(flow, api):
    response = api(flow.manager).get("/api/v1/projects/FM/plan/?seed=-1")

    assert response.status_code == 400
    assert response.json()["fields"] == {
        "seed": ["must be a whole number from 1 to 4294967295, given once"]
    }


@pytest.mark.django_db
@pytest.mark.parametrize(
    "seed", ["0", "4294967296", "9" * 5000], ids=["zero", "past 32 bits", "5000 digits"]
)
def test_a_seed_out_of_range_is_a_400_naming_its_bounds(flow, api, seed):
    response = api(flow.agent).get(f"/api/v1/projects/FM/plan/?seed={seed}")

    assert (response.status_code, response.json()["fields"]) == (
        400,
        {"seed": ["must be a whole number from 1 to 4294967295, given once"]},
    )


@pytest.mark.django_db
def test_only_the_default_seeds_forecast_is_kept_in_the_cache(flow, api, clock, monkeypatch):
    # Any member chooses the seed: had each one been kept for a day, a loop over seeds
    # would fill the cache the rate limits are counted in.
    finished(flow, clock, 2)
    flow.ready(title="open")
    plan_module.cache.clear()  # an earlier test may have kept this very forecast
    kept = []
    monkeypatch.setattr(plan_module.cache, "set", lambda key, *args, **kw: kept.append(key))
    client = api(flow.agent)

    chosen = [client.get(f"/api/v1/projects/FM/plan/?seed={n}") for n in (1, 2, 3)]
    default = client.get("/api/v1/projects/FM/plan/")

    assert [r.json()["forecast"]["seed"] for r in chosen] == [1, 2, 3]
    assert default.json()["forecast"]["seed"] == default_seed(flow.project)
    assert len([key for key in kept if key.startswith("plan-forecast:")]) == 1


@pytest.mark.django_db
def test_a_cycle_in_the_database_is_named_and_marked(flow, api):
    a = flow.ready(title="a")
    b = flow.ready(title="b", depends_on=[a])
    a.depends_on.add(b)  # as an import of another tool's tracker could leave it

    body = api(flow.manager).get("/api/v1/projects/FM/plan/").json()

    assert body["cycles"] == [[a.key, b.key]]
    assert [n["in_cycle"] for n in body["nodes"]] == [True, True]


def page_queries(client, django_assert_num_queries, expected):
    # The session, the user, their memberships, the project, the specs; the plan's five.
    with django_assert_num_queries(expected):
        response = client.get("/projects/FM/plan/")
    assert response.status_code == 200
    return response.content.decode()


@pytest.mark.django_db
def test_the_page_costs_the_same_queries_for_3_tasks_as_for_30(
    flow, client, clock, django_assert_num_queries
):
    finished(flow, clock, 3, labels=["api"])
    chain(flow, 3, labels=["api"])
    client.force_login(flow.manager)
    small = page_queries(client, django_assert_num_queries, 10)

    chain(flow, 27)
    large = page_queries(client, django_assert_num_queries, 10)

    assert small.count('class="node state-') == 3
    assert large.count('class="node state-') == 30


@pytest.mark.django_db
def test_the_page_draws_each_task_as_a_link_and_lists_them_for_screen_readers(flow, client, clock):
    blocked, _ = flow.blocked(title="stuck <b>here</b>")
    steps = chain(flow, 3)
    client.force_login(flow.agent)

    html = client.get("/projects/FM/plan/").content.decode()

    assert 'role="group" aria-labelledby="plan-svg-title" aria-describedby="plan-svg-desc"' in html
    path = " → ".join(t.key for t in steps)
    assert f'<desc id="plan-svg-desc">Critical path: {path} (12.0 h).' in html
    for task in steps:
        assert f'<a href="/tasks/{task.key}/" class="node state-ready critical"' in html
        assert f'<tr id="node-{task.key}" class="on-path">' in html
    assert f'<a href="/tasks/{blocked.key}/" class="node state-blocked"' in html
    assert "stuck &lt;b&gt;here&lt;/b&gt;" in html and "<b>here</b>" not in html
    assert 'class="edge critical" marker-end="url(#plan-arrow-critical)"' in html
    # A node's name is its <title>, which starts with its visible text (WCAG 2.5.3).
    assert f'data-key="{blocked.key}"><title>{blocked.key} blocked' in html
    assert 'aria-label="FM-' not in html
    assert '<a href="/plan/" class="active" aria-current="page">Plan</a>' in html


@pytest.mark.django_db
def test_the_page_filters_by_spec_and_refuses_another_projects(flow, other_flow, client):
    spec = flow.spec(criteria=[])
    mine = flow.ready(title="in the spec", spec=spec)
    other = flow.ready(title="not in the spec")
    foreign = other_flow.spec(criteria=[])
    client.force_login(flow.manager)

    html = client.get(f"/projects/FM/plan/?spec={spec.key}").content.decode()
    unknown = client.get(f"/projects/FM/plan/?spec={foreign.key}")
    outsider = client.get("/projects/OT/plan/")

    assert f'href="/tasks/{mine.key}/"' in html and f'href="/tasks/{other.key}/"' not in html
    assert f'<option value="{spec.key}" selected>' in html
    assert (unknown.status_code, outsider.status_code) == (404, 404)


@pytest.mark.django_db
def test_the_plan_index_goes_straight_to_the_only_project(flow, client):
    client.force_login(flow.agent)

    response = client.get("/plan/")

    assert (response.status_code, response["Location"]) == (302, "/projects/FM/plan/")


@pytest.mark.django_db
def test_a_project_with_nothing_open_says_so(flow, client):
    client.force_login(flow.manager)

    html = client.get("/projects/FM/plan/").content.decode()

    assert "Nothing is left to do: every task is done or cancelled." in html
    assert '<p class="stat" id="forecast-none">Nothing is open</p>' in html
