"""The review UI's lists: login and each user's home, the review queue and the task board,
and their query counts."""

import re

import pytest
from django.utils import timezone

from evidence import services as evidence_services
from evidence.models import GateRun
from projects.models import Membership
from projects.roles import Role
from tasks import attempts
from tasks.filters import TaskFilter
from tasks.forms import STATE_ORDER
from tasks.models import Attempt, Task, TaskState
from tests.factories import member
from tests.tasks.pages import html, queries_for


def resubmit(flow, task):
    """Claim ``task`` again after its attempt ended, submit, and pass the gates."""
    attempt = attempts.task_claim(agent=flow.agent, project=flow.project)
    assert attempt.task_id == task.pk
    attempt = attempts.attempt_submit(attempt=attempt, actor=flow.agent, summary="2", change={})
    return attempts.attempt_gates_passed(attempt=attempt)


def finish_run(run, outcome):
    evidence_services.gate_run_start(run=run)
    evidence_services.gate_run_finish(
        run=run, outcome=outcome, verdict={"outcome": outcome}, summary=f"{run.gate} {outcome}"
    )


# --- Login and home --------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "path", ["/", "/review/", "/tasks/", "/tasks/FM-1/", "/decisions/", "/dashboard/", "/tokens/"]
)
def test_anonymous_users_are_sent_to_the_login_page(client, flow, path):
    flow.draft()

    response = client.get(path)

    assert (response.status_code, response["Location"]) == (302, f"/login/?next={path}")


@pytest.mark.django_db
def test_the_login_page_renders_a_form_with_a_csrf_token(client):
    response = client.get("/login/?next=/review/")

    assert response.status_code == 200
    assert '<input type="password" name="password"' in html(response)
    assert '<input type="hidden" name="next" value="/review/">' in html(response)
    assert 'name="csrfmiddlewaretoken"' in html(response)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("role", "home"), [("reviewer", "/review/"), ("manager", "/dashboard/"), ("agent", "/tasks/")]
)
def test_logging_in_lands_on_the_users_home(client, flow, role, home):
    user = getattr(flow, role)

    response = client.post("/login/", {"username": user.username, "password": "pw"}, follow=True)

    assert response.redirect_chain == [("/", 302), (home, 302)]
    assert (response.status_code, response.wsgi_request.user) == (200, user)


@pytest.mark.django_db
def test_a_wrong_password_stays_on_the_login_page(client, flow):
    response = client.post("/login/", {"username": flow.reviewer.username, "password": "nope"})

    assert response.status_code == 200
    assert "Your username and password didn't match." in html(response)
    assert "_auth_user_id" not in client.session


# --- Review queue ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_review_queue_lists_in_review_tasks_oldest_submission_first(client, flow):
    for title in ("First", "Second", "Third"):
        flow.in_review(title=title)
    flow.claimed(title="Still being worked on")
    client.force_login(flow.reviewer)

    response = client.get("/review/")

    assert response.status_code == 200
    assert [row["task"].key for row in response.context["rows"]] == ["FM-1", "FM-2", "FM-3"]
    keys = re.findall(r'<a href="/tasks/(FM-\d+)/" class="mono">', html(response))
    assert keys == ["FM-1", "FM-2", "FM-3"]


@pytest.mark.django_db
def test_review_queue_orders_by_submission_not_by_key(client, flow):
    first, attempt = flow.in_review()
    flow.in_review()
    Attempt.objects.filter(pk=attempt.pk).update(submitted_at=timezone.now())
    client.force_login(flow.reviewer)

    response = client.get("/review/")

    assert [row["task"].key for row in response.context["rows"]] == ["FM-2", first.key]


@pytest.mark.django_db
def test_review_queue_project_filter_narrows_it(client, flow, other_flow):
    flow.in_review()
    other_flow.in_review()
    member(other_flow.project, "reviewer", flow.reviewer.username)
    client.force_login(flow.reviewer)

    everything = client.get("/review/")
    narrowed = client.get("/review/?project=OT")

    assert [row["task"].key for row in everything.context["rows"]] == ["FM-1", "OT-1"]
    assert [row["task"].key for row in narrowed.context["rows"]] == ["OT-1"]
    assert '<option value="OT" selected>' in html(narrowed)


@pytest.mark.django_db
def test_review_queue_never_shows_another_projects_tasks(client, flow, other_flow):
    flow.in_review()
    other_flow.in_review()
    client.force_login(flow.reviewer)

    unfiltered = client.get("/review/")
    asked_for = client.get("/review/?project=OT")

    assert [row["task"].key for row in unfiltered.context["rows"]] == ["FM-1"]
    assert asked_for.context["rows"] == []
    assert "OT-1" not in html(unfiltered) + html(asked_for)


def failed_then_in_review(flow):
    """A task whose first attempt failed two gates and whose second passed every gate."""
    task, attempt = flow.checking()
    runs = list(attempt.gate_runs.order_by("gate"))  # diff-scope, required-evidence, ...
    finish_run(runs[0], "failed")
    finish_run(runs[1], "error")
    finish_run(runs[2], "passed")
    attempts.attempt_gates_failed(attempt=attempt, reason="gates failed")
    resubmit(flow, task)
    return task


@pytest.mark.django_db
def test_review_queue_counts_the_current_attempts_failed_gates_apart_from_earlier_ones(
    client, flow
):
    failed_then_in_review(flow)
    flow.in_review()
    client.force_login(flow.reviewer)

    response = client.get("/review/")

    rows = [
        (row["task"].key, row["task"].failed_gates, row["task"].earlier_failed_gates)
        for row in response.context["rows"]
    ]
    assert rows == [("FM-1", 0, 2), ("FM-2", 0, 0)]
    cells = re.findall(r'<td class="num">(0.*?)</td>', html(response))
    assert cells == ['0 <span class="muted small">(2 in earlier attempts)</span>', "0"]
    assert 'class="badge bad"' not in html(response)


@pytest.mark.django_db
def test_review_queue_shows_the_current_attempts_own_failed_gate_as_a_badge(client, flow):
    task = Task.objects.get(pk=failed_then_in_review(flow).pk)
    # No gate lets a failed run through to review today; forced so the two counts differ.
    GateRun.objects.filter(attempt=task.current_attempt, gate="diff-scope").update(state="failed")
    client.force_login(flow.reviewer)

    page = html(client.get("/review/"))

    assert (
        '<td class="num"><span class="badge bad">1</span>'
        ' <span class="muted small">(2 in earlier attempts)</span></td>'
    ) in page


# --- Task board ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_board_puts_each_task_in_the_column_of_its_state(client, flow):
    flow.in_review()
    flow.claimed()
    flow.draft()
    flow.ready()
    flow.cancelled()
    client.force_login(flow.agent)

    response = client.get("/tasks/")

    columns = {c["state"]: [t.key for t in c["cards"]] for c in response.context["columns"]}
    assert columns == {
        "draft": ["FM-3"],
        "ready": ["FM-4"],
        "claimed": ["FM-2"],
        "checking": [],
        "in_review": ["FM-1"],
        "approved": [],
        "blocked": [],
        "failed": [],
        "done": [],
        "cancelled": ["FM-5"],
    }
    in_review = re.search(r'aria-label="In Review">(.*?)</section>', html(response), re.S)[1]
    assert re.findall(r'<a class="card" href="/tasks/([\w-]+)/">', in_review) == ["FM-1"]


@pytest.mark.django_db
def test_board_finds_tasks_by_title_or_key(client, flow):
    flow.draft(title="Fix the login page")
    flow.draft(title="Write the deployment guide")
    client.force_login(flow.manager)

    by_title = client.get("/tasks/?q=LOGIN")
    by_key = client.get("/tasks/?q=fm-2")

    def keys(response):
        return [t.key for c in response.context["columns"] for t in c["cards"]]

    assert keys(by_title) == ["FM-1"]
    assert keys(by_key) == ["FM-2"]
    assert "Write the deployment guide" not in html(by_title)


@pytest.mark.django_db
def test_board_filters_labels_through_the_apis_filterset(client, api, flow, monkeypatch):
    flow.draft(title="Ours", labels=["ui"])
    flow.draft(title="Theirs", labels=["api"])
    asked, filter_label = [], TaskFilter.filter_label
    monkeypatch.setattr(
        TaskFilter,
        "filter_label",
        lambda self, tasks, name, value: (
            asked.append(value) or filter_label(self, tasks, name, value)
        ),
    )
    client.force_login(flow.manager)

    board = client.get("/tasks/?label=ui")
    listed = api(flow.manager).get("/api/v1/tasks/?label=ui")

    assert [t.key for c in board.context["columns"] for t in c["cards"]] == ["FM-1"]
    assert [t["key"] for t in listed.json()["results"]] == ["FM-1"]
    assert asked == ["ui", "ui"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "query",
    [
        "",
        "project=OT",
        "project=FM&state=ready",
        "state=draft&state=ready",
        "label=ui",
        "label=ui&state=draft",
        "q=login",
        "q=fm-3",
        "q=ot-1&project=OT",
        "project=NOPE",
    ],
)
def test_board_and_api_give_the_same_tasks_for_the_same_filters(
    client, api, flow, other_flow, query
):
    flow.draft(title="Fix the login page", labels=["ui"])
    flow.ready(title="Login by token", labels=["api"])
    flow.ready(title="Write the guide", labels=["ui"])
    other_flow.ready(title="Their login", labels=["ui"])
    other_flow.draft(title="Theirs")
    Membership.objects.create(user=flow.manager, project=other_flow.project, role=Role.MANAGER)
    client.force_login(flow.manager)

    board = client.get(f"/tasks/?{query}")
    listed = api(flow.manager).get(f"/api/v1/tasks/?{query}")

    assert listed.status_code == 200
    on_board = sorted(t.key for c in board.context["columns"] for t in c["cards"])
    assert on_board == sorted(t["key"] for t in listed.json()["results"])


@pytest.mark.django_db
def test_board_shows_only_the_columns_of_the_states_asked_for(client, flow):
    flow.draft(title="Drafted")
    flow.ready(title="Published")
    client.force_login(flow.manager)

    response = client.get("/tasks/?state=ready&state=bogus")
    filtered = client.get("/tasks/?state=ready")

    assert [c["state"] for c in response.context["columns"]] == [s for s in STATE_ORDER]
    assert [(c["state"], [t.key for t in c["cards"]]) for c in filtered.context["columns"]] == [
        ("ready", ["FM-2"])
    ]


@pytest.mark.django_db
def test_board_never_shows_another_projects_tasks(client, flow, other_flow):
    flow.draft(title="Ours")
    other_flow.draft(title="Theirs")
    client.force_login(flow.manager)

    response = client.get("/tasks/?project=OT")
    unfiltered = client.get("/tasks/")

    assert [t.key for c in response.context["columns"] for t in c["cards"]] == []
    assert [t.key for c in unfiltered.context["columns"] for t in c["cards"]] == ["FM-1"]
    assert "Theirs" not in html(unfiltered)


# --- Query counts ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_review_queue_query_count_does_not_grow(client, flow, django_assert_max_num_queries):
    flow.in_review()
    client.force_login(flow.reviewer)
    one = queries_for(client, "/review/", django_assert_max_num_queries)
    for _ in range(49):
        flow.in_review()

    many = queries_for(client, "/review/", django_assert_max_num_queries)

    assert many == one


@pytest.mark.django_db
def test_review_queue_query_count_does_not_grow_with_earlier_failed_attempts(
    client, flow, django_assert_max_num_queries
):
    flow.in_review()
    client.force_login(flow.reviewer)
    one = queries_for(client, "/review/", django_assert_max_num_queries)
    for _ in range(10):
        failed_then_in_review(flow)

    many = queries_for(client, "/review/", django_assert_max_num_queries)

    assert many == one
    assert html(client.get("/review/")).count("(2 in earlier attempts)") == 10


@pytest.mark.django_db
def test_board_query_count_does_not_grow(client, flow, django_assert_max_num_queries):
    flow.claimed()
    client.force_login(flow.reviewer)
    one = queries_for(client, "/tasks/", django_assert_max_num_queries)
    for _ in range(49):
        flow.claimed()

    many = queries_for(client, "/tasks/", django_assert_max_num_queries)

    assert many == one


def test_the_board_has_a_column_for_every_state(client, flow):
    client.force_login(flow.agent)

    response = client.get("/tasks/")

    assert sorted(c["state"] for c in response.context["columns"]) == sorted(TaskState.values)
