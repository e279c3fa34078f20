"""Specs and decisions through the API."""

import pytest

from decisions.models import Decision, Spec, SpecVersion
from tests.factories import CRITERIA, expire_lease


def decision_body(**overrides):
    body = {
        "title": "Use SKIP LOCKED",
        "context": "Two agents must not share a task.",
        "decision": "SKIP LOCKED.",
    }
    return {**body, **overrides}


@pytest.mark.django_db
def test_a_manager_creates_a_spec_with_a_draft_first_version(flow, api):
    response = api(flow.manager).post(
        "/api/v1/specs/",
        {"project": "FM", "title": "Claims", "body": "# Claims", "criteria": CRITERIA},
        format="json",
    )

    assert response.status_code == 201
    body = response.json()
    assert (body["key"], body["current_version"], body["versions"][0]["state"]) == (
        "FM-S1",
        None,
        "draft",
    )


@pytest.mark.django_db
def test_bad_criteria_are_400_and_nothing_is_created(flow, api):
    criteria = [{"key": "AC-1", "text": "t", "proof": {"check": "tests"}}]

    response = api(flow.manager).post(
        "/api/v1/specs/",
        {"project": "FM", "title": "x", "body": "b", "criteria": criteria},
        format="json",
    )

    assert response.status_code == 400
    assert response.json()["fields"]["criteria"] == [
        "AC-1: a tests check needs a select pattern, e.g. tests/test_x.py::*"
    ]
    assert Spec.objects.count() == 0


@pytest.mark.django_db
def test_accepting_a_new_version_supersedes_the_current_one(flow, api):
    spec = flow.spec()
    client = api(flow.manager)
    client.post(
        f"/api/v1/specs/{spec.key}/versions/", {"body": "v2", "criteria": CRITERIA}, format="json"
    )

    response = client.post(f"/api/v1/specs/{spec.key}/versions/2/accept/", {}, format="json")

    assert (response.status_code, response.json()["state"]) == (200, "accepted")
    assert dict(SpecVersion.objects.filter(spec=spec).values_list("number", "state")) == {
        1: "superseded",
        2: "accepted",
    }


@pytest.mark.django_db
def test_an_agent_cannot_accept_a_spec_version(flow, api):
    spec = flow.spec()
    api(flow.manager).post(
        f"/api/v1/specs/{spec.key}/versions/", {"body": "v2", "criteria": CRITERIA}, format="json"
    )

    response = api(flow.agent).post(
        f"/api/v1/specs/{spec.key}/versions/2/accept/", {}, format="json"
    )

    assert (response.status_code, response.json()["code"]) == (403, "permission_denied")
    assert SpecVersion.objects.get(spec=spec, number=2).state == "draft"


@pytest.mark.django_db
def test_the_lease_holder_proposes_a_decision_during_its_attempt(flow, api):
    task, attempt = flow.claimed()

    response = api(flow.agent).post(
        f"/api/v1/attempts/{attempt.pk}/decisions/",
        decision_body(alternatives=[{"option": "Table lock", "reason": "serial"}]),
        format="json",
    )

    assert response.status_code == 201
    body = response.json()
    assert (body["key"], body["state"], body["proposed_in"], body["tasks"]) == (
        "FM-D1",
        "proposed",
        f"{task.key}#1",
        [task.key],
    )
    assert body["alternatives"] == [{"option": "Table lock", "reason": "serial"}]


@pytest.mark.django_db
def test_a_lost_lease_cannot_propose(flow, api):
    _, attempt = flow.claimed()
    expire_lease(attempt)

    response = api(flow.agent).post(
        f"/api/v1/attempts/{attempt.pk}/decisions/", decision_body(), format="json"
    )

    assert (response.status_code, response.json()["code"]) == (409, "lease_lost")
    assert Decision.objects.count() == 0


@pytest.mark.django_db
def test_an_agent_token_cannot_accept_decisions(flow, api):
    _, attempt = flow.claimed()
    key = (
        api(flow.agent)
        .post(f"/api/v1/attempts/{attempt.pk}/decisions/", decision_body(), format="json")
        .json()["key"]
    )

    response = api(flow.agent2).post(f"/api/v1/decisions/{key}/accept/", {}, format="json")

    assert (response.status_code, response.json()["code"]) == (403, "permission_denied")
    assert Decision.objects.get(key=key).state == "proposed"


@pytest.mark.django_db
def test_a_reviewer_accepts_and_the_superseded_decision_says_by_whom(flow, api):
    client, proposer = api(flow.reviewer), api(flow.manager)
    first = proposer.post("/api/v1/decisions/", decision_body(project="FM"), format="json").json()[
        "key"
    ]
    client.post(f"/api/v1/decisions/{first}/accept/", {}, format="json")
    second = proposer.post(
        "/api/v1/decisions/",
        decision_body(project="FM", title="Order by priority", supersedes=[first]),
        format="json",
    ).json()["key"]

    response = client.post(
        f"/api/v1/decisions/{second}/accept/", {"reason": "agreed"}, format="json"
    )

    assert (response.status_code, response.json()["state"], response.json()["supersedes"]) == (
        200,
        "accepted",
        [first],
    )
    old = client.get(f"/api/v1/decisions/{first}/").json()
    assert (old["state"], old["superseded_by"]) == ("superseded", [second])


@pytest.mark.django_db
def test_reject_needs_a_reason(flow, api):
    client = api(flow.reviewer)
    key = (
        api(flow.manager)
        .post("/api/v1/decisions/", decision_body(project="FM"), format="json")
        .json()["key"]
    )

    response = client.post(f"/api/v1/decisions/{key}/reject/", {}, format="json")

    assert (response.status_code, list(response.json()["fields"])) == (400, ["reason"])
    assert Decision.objects.get(key=key).state == "proposed"


@pytest.mark.django_db
def test_an_amending_decision_is_accepted_by_a_manager_and_creates_the_version(flow, api):
    spec = flow.spec()
    amendment = {"spec": spec.key, "body": "# v2", "criteria": CRITERIA}
    key = (
        api(flow.reviewer)
        .post(
            "/api/v1/decisions/", decision_body(project="FM", amendments=[amendment]), format="json"
        )
        .json()["key"]
    )

    refused = api(flow.reviewer).post(f"/api/v1/decisions/{key}/accept/", {}, format="json")
    accepted = api(flow.manager).post(f"/api/v1/decisions/{key}/accept/", {}, format="json")

    assert (refused.status_code, accepted.status_code) == (403, 200)
    version = SpecVersion.objects.get(spec=spec, state="accepted")
    assert (version.number, version.body, version.source_decision.key) == (2, "# v2", key)


@pytest.mark.django_db
def test_decision_search_finds_words_and_filters_by_state(flow, api):
    client = api(flow.reviewer)
    client.post(
        "/api/v1/decisions/",
        decision_body(project="FM", title="Leases last five minutes"),
        format="json",
    )
    client.post(
        "/api/v1/decisions/",
        decision_body(project="FM", title="Evidence by SHA-256"),
        format="json",
    )

    found = client.get("/api/v1/decisions/", {"q": "lease minutes"}).json()["results"]
    none = client.get("/api/v1/decisions/", {"q": "lease", "state": "accepted"}).json()["results"]

    assert [d["title"] for d in found] == ["Leases last five minutes"]
    assert none == []


@pytest.mark.django_db
def test_decisions_of_another_project_are_invisible(flow, other_flow, api):
    api(other_flow.reviewer).post("/api/v1/decisions/", decision_body(project="OT"), format="json")

    listed = api(flow.reviewer).get("/api/v1/decisions/").json()["results"]
    detail = api(flow.reviewer).get("/api/v1/decisions/OT-D1/")

    assert listed == []
    assert detail.status_code == 404
