"""Projects: the gate policy and attempt budget managers set, through the API and the admin."""

from decimal import Decimal

import pytest
from django.urls import reverse

from projects.models import Event, Project


@pytest.mark.django_db
def test_members_see_their_projects_with_their_roles(flow, other_flow, api):
    body = api(flow.reviewer).get("/api/v1/projects/").json()

    assert [(p["slug"], p["my_roles"]) for p in body["results"]] == [("FM", ["reviewer"])]


@pytest.mark.django_db
def test_a_manager_sets_the_gate_policy_and_it_is_on_record(flow, api):
    policy = {"tests-pass": {}, "coverage": {"threshold": 0.9}}

    response = api(flow.manager).patch(
        "/api/v1/projects/FM/", {"gate_policy": policy}, format="json"
    )

    assert response.status_code == 200
    assert response.json()["gate_policy"] == {"tests-pass": {}, "coverage": {"threshold": 0.9}}
    event = Event.objects.get(transition="edit", object_key="FM")
    assert (event.actor, event.extra["fields"]) == (flow.manager, ["gate_policy"])


@pytest.mark.django_db
def test_an_unknown_gate_is_400_and_the_policy_stays(flow, api):
    before = Project.objects.get(slug="FM").gate_policy

    response = api(flow.manager).patch(
        "/api/v1/projects/FM/", {"gate_policy": {"lint": {}}}, format="json"
    )

    assert response.status_code == 400
    assert response.json()["fields"]["gate_policy"][0].startswith("unknown gate 'lint' (known: ")
    assert Project.objects.get(slug="FM").gate_policy == before


@pytest.mark.django_db
def test_bad_gate_parameters_are_400(flow, api):
    response = api(flow.manager).patch(
        "/api/v1/projects/FM/", {"gate_policy": {"coverage": {"threshold": 2}}}, format="json"
    )

    assert (response.status_code, response.json()["fields"]) == (
        400,
        {"gate_policy": ["coverage: threshold must lie between 0 and 1"]},
    )


@pytest.mark.django_db
def test_only_managers_change_projects(flow, api):
    response = api(flow.reviewer).patch("/api/v1/projects/FM/", {"max_attempts": 9}, format="json")

    assert (response.status_code, response.json()["code"]) == (403, "permission_denied")
    assert Project.objects.get(slug="FM").max_attempts == 3


@pytest.mark.django_db
def test_the_admin_refuses_an_unknown_gate_on_the_form(admin_client, flow):
    project = flow.project
    url = reverse("admin:projects_project_change", args=[project.pk])
    form = {
        "name": project.name,
        "repository_url": "",
        "gate_policy": '{"nope": {}}',
        "max_attempts": 3,
        "memberships-TOTAL_FORMS": 0,
        "memberships-INITIAL_FORMS": 0,
        "memberships-MIN_NUM_FORMS": 0,
        "memberships-MAX_NUM_FORMS": 1000,
    }

    response = admin_client.post(url, form)

    assert response.status_code == 200
    assert "unknown gate &#x27;nope&#x27;" in response.content.decode()
    assert Project.objects.get(pk=project.pk).gate_policy == project.gate_policy


@pytest.mark.django_db
@pytest.mark.parametrize(("sent", "stored"), [("120.5", Decimal("120.50")), ("-5", None)])
def test_the_admin_sets_the_monthly_budget_through_the_service(admin_client, flow, sent, stored):
    project = flow.project
    url = reverse("admin:projects_project_change", args=[project.pk])
    form = {
        "name": project.name,
        "repository_url": "",
        "gate_policy": "{}",
        "landing": "{}",
        "max_attempts": 3,
        "budget_usd": sent,
        "memberships-TOTAL_FORMS": 0,
        "memberships-INITIAL_FORMS": 0,
        "memberships-MIN_NUM_FORMS": 0,
        "memberships-MAX_NUM_FORMS": 1000,
    }

    response = admin_client.post(url, form)

    assert response.status_code == (302 if stored else 200)
    assert Project.objects.get(pk=project.pk).budget_usd == stored
    edits = Event.objects.filter(object_key="FM", transition="edit")
    assert [e.extra.get("budget_usd") for e in edits] == ([str(stored)] if stored else [])


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("sent", "stored"),
    [
        (
            '{"m": {"input": "3", "set_on": "2026-12-01"}}',
            {"m": {"input": "3", "set_on": "2026-12-01"}},
        ),
        ('{"m": {"input": "3"}}', {}),
    ],
)
def test_the_admin_sets_the_price_table_through_the_service(admin_client, flow, sent, stored):
    project = flow.project
    url = reverse("admin:projects_project_change", args=[project.pk])
    form = {
        "name": project.name,
        "repository_url": "",
        "gate_policy": "{}",
        "landing": "{}",
        "max_attempts": 3,
        "prices": sent,
        "memberships-TOTAL_FORMS": 0,
        "memberships-INITIAL_FORMS": 0,
        "memberships-MIN_NUM_FORMS": 0,
        "memberships-MAX_NUM_FORMS": 1000,
    }

    response = admin_client.post(url, form)

    assert response.status_code == (302 if stored else 200)
    assert Project.objects.get(pk=project.pk).prices == stored
    edits = Event.objects.filter(object_key="FM", transition="edit")
    assert [e.extra.get("prices") for e in edits] == ([stored] if stored else [])
