"""While the database is unreachable, the site answers 503 with a retry hint, never 500."""

import pytest
from django.db import OperationalError

from tasks import attempts


@pytest.fixture
def database_down(monkeypatch):
    def unreachable(*args, **kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    return lambda target, name: monkeypatch.setattr(target, name, unreachable)


@pytest.mark.django_db
def test_an_api_call_during_an_outage_is_503_with_retry_after(flow, api, database_down):
    flow.ready()
    client = api(flow.agent)
    database_down(attempts, "task_claim")

    response = client.post("/api/v1/tasks/claim/", {}, format="json")

    assert (response.status_code, response.json()["code"], response["Retry-After"]) == (
        503,
        "unavailable",
        "5",
    )


@pytest.mark.django_db
def test_a_page_during_an_outage_is_503_not_500(flow, client, database_down):
    from tasks import views

    client.force_login(flow.reviewer)
    database_down(views, "user_projects")

    response = client.get("/review/")

    assert (response.status_code, response["Retry-After"]) == (503, "5")
    assert b"The database is unavailable" in response.content


@pytest.mark.django_db
@pytest.mark.parametrize("where", ["api", "page"])
def test_an_outage_logs_one_warning_per_refused_request_not_an_error(
    flow, api, client, database_down, caplog, where
):
    from tasks import views

    flow.ready()
    if where == "api":
        database_down(attempts, "task_claim")
        response = api(flow.agent).post("/api/v1/tasks/claim/", {}, format="json")
    else:
        client.force_login(flow.reviewer)
        database_down(views, "user_projects")
        response = client.get("/review/")

    assert response.status_code == 503
    assert [(r.levelname, r.getMessage()) for r in caplog.records if r.levelno >= 30] == [
        ("WARNING", "database unavailable: server closed the connection unexpectedly")
    ]


@pytest.mark.django_db
def test_a_verdict_whose_answer_cannot_be_read_is_rolled_back_with_the_503(
    flow, api, database_down
):
    # Found by the restart-postgres proof: the approval committed, the answer's reads
    # failed, the 503 said "retry", and the retry got 409 because the task was done.
    from projects.models import Event
    from tasks import api as task_api
    from tasks.models import Task

    task, _ = flow.in_review()
    events_before = Event.objects.count()
    database_down(task_api.TaskSerializer, "to_representation")

    response = api(flow.reviewer).post(
        f"/api/v1/tasks/{task.key}/review/", {"verdict": "approve"}, format="json"
    )

    assert (response.status_code, response.json()["code"]) == (503, "unavailable")
    assert Task.objects.get(pk=task.pk).state == "in_review"
    assert Event.objects.count() == events_before
