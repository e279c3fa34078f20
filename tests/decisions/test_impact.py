"""What a decision changed: the spec versions it created (their diff), the tasks it binds,
and the approvals judged while it was in force; on its page and at
``GET /api/v1/decisions/{key}/impact/``."""

import copy

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from decisions import services
from decisions.selectors import decision_impact
from tasks import attempts, review
from tasks import services as task_services
from tests.conftest import world_for_the_module
from tests.factories import Flow, ProjectFactory, all_met

AMENDED_CRITERIA = [
    {
        "key": "AC-1",
        "text": "Claims are exclusive, even across processes.",
        "proof": {"check": "tests", "select": "tests/test_claim.py::*"},
    },
    {"key": "AC-3", "text": "Readable code.", "proof": {"check": "review"}},
    {"key": "AC-4", "text": "Claims are fast.", "proof": {"check": "review"}},
]


def propose(flow, **kwargs):
    return services.decision_propose(
        project=flow.project,
        actor=flow.reviewer,
        title=kwargs.pop("title", "Claim with SKIP LOCKED"),
        context="Two agents must never get the same task.",
        decision="Use SELECT ... FOR UPDATE SKIP LOCKED.",
        **kwargs,
    )


def judge(flow, task, verdict="approve"):
    """Claim, submit and judge ``task`` (a draft or ready task nobody else is ahead of)."""
    if task.state == "draft":
        task = task_services.task_publish(task=task, actor=flow.manager)
    attempt = attempts.task_claim(agent=flow.agent, project=flow.project)
    assert attempt.task_id == task.pk
    attempts.attempt_submit(attempt=attempt, actor=flow.agent, summary="s", change={})
    attempts.attempt_gates_passed(attempt=attempt)
    task.refresh_from_db()
    if verdict == "approve":
        return review.task_approve(task=task, actor=flow.reviewer, criteria=all_met(attempt))
    return review.task_reject(task=task, actor=flow.reviewer, reason="no tests")


def build():
    """FM-D1 amends FM-S1 (v1 → v2) and names FM-2; FM-D2 later supersedes it.

    FM-1 (on FM-S1) approved before FM-D1 was accepted; FM-3 (on FM-S1) and FM-2 (named)
    approved while it was in force; FM-4 (on FM-S1) rejected then; FM-5 (neither) approved;
    FM-6 (on FM-S1) approved after FM-D2 superseded it. FM-D3 proposes to amend FM-S1 again.
    """
    flow, other = Flow(ProjectFactory(slug="FM")), Flow(ProjectFactory(slug="OT"))
    flow.gates({})
    spec = flow.spec()
    flow.done(spec=spec)
    named = flow.draft(title="Named by the decision")
    amendment = {"spec": spec, "body": "# Spec v2\n", "criteria": AMENDED_CRITERIA}
    d1 = propose(flow, tasks=[named], amendments=[amendment])
    services.decision_accept(decision=d1, actor=flow.manager)
    flow.done(spec=spec)
    judge(flow, named)
    judge(flow, flow.draft(title="Rejected", spec=spec, max_attempts=1), verdict="reject")
    flow.done()
    d2 = propose(flow, title="Claim with advisory locks", specs=[spec], supersedes=[d1])
    services.decision_accept(decision=d2, actor=flow.manager)
    flow.done(spec=spec)
    d3 = propose(flow, title="Amend again", amendments=[{**amendment, "body": "# Spec v3\n"}])
    return {"flow": flow, "other": other, "spec": spec, "d1": d1, "d2": d2, "d3": d3}


@pytest.fixture(scope="module")
def _world(django_db_setup, django_db_blocker):
    # The world holds no evidence files: each test keeps its own media folder.
    with world_for_the_module(django_db_blocker, build) as world:
        yield world


@pytest.fixture
def world(db, _world):
    """The world, built once for the module; each test is rolled back to it."""
    return copy.deepcopy(_world)


def keys(rows):
    return [(r["task"], r["attempt"], r["reviewer"], r["spec"]) for r in rows]


@pytest.mark.django_db
def test_impact_shows_the_spec_version_it_created_as_a_diff_against_the_one_it_replaced(world):
    impact = decision_impact(world["d1"])

    (amended,) = impact["amended"]
    assert (amended["spec"], amended["base_version"], amended["version"], amended["state"]) == (
        "FM-S1",
        1,
        2,
        "accepted",
    )
    assert amended["body_diff"] == [
        ("hunk", "--- v1"),
        ("hunk", "+++ v2"),
        ("hunk", "@@ -1 +1 @@"),
        ("del", "-# Spec"),
        ("add", "+# Spec v2"),
    ]
    assert [(c["change"], c["key"]) for c in amended["criteria_changes"]] == [
        ("changed", "AC-1"),
        ("added", "AC-4"),
        ("removed", "AC-2"),
    ]
    changed = amended["criteria_changes"][0]
    assert changed["before"]["text"] == "Claims are exclusive."
    assert changed["after"]["text"] == "Claims are exclusive, even across processes."
    assert amended["criteria_changes"][1]["before"] is None
    assert amended["criteria_unchanged"] == ["AC-3"]


@pytest.mark.django_db
def test_impact_lists_the_tasks_it_binds_by_name_or_by_spec(world):
    impact = decision_impact(world["d1"])

    assert [(t["task"], t["via"], t["state"]) for t in impact["tasks"]] == [
        ("FM-1", "FM-S1", "done"),
        ("FM-2", "task", "done"),
        ("FM-3", "FM-S1", "done"),
        ("FM-4", "FM-S1", "failed"),
        ("FM-6", "FM-S1", "done"),
    ]


@pytest.mark.django_db
def test_impact_splits_approvals_judged_while_it_was_in_force_from_the_others(world):
    impact = decision_impact(world["d1"])

    assert keys(impact["approvals"]) == [
        ("FM-3", 1, "fm-reviewer", "FM-S1 v2"),
        ("FM-2", 1, "fm-reviewer", None),
    ]
    # FM-1 before it was accepted, FM-6 after FM-D2 superseded it; FM-4 was rejected.
    assert keys(impact["approvals_without"]) == [
        ("FM-1", 1, "fm-reviewer", "FM-S1 v1"),
        ("FM-6", 1, "fm-reviewer", "FM-S1 v2"),
    ]
    assert all(r["judged_at"] for r in impact["approvals"] + impact["approvals_without"])
    assert keys(decision_impact(world["d2"])["approvals"]) == [
        ("FM-6", 1, "fm-reviewer", "FM-S1 v2")
    ]


@pytest.mark.django_db
def test_a_proposed_decision_has_changed_nothing_yet(world):
    impact = decision_impact(world["d3"])

    assert impact["state"] == "proposed"
    assert impact["amended"] == []
    assert impact["approvals"] == []
    assert [t["task"] for t in impact["tasks"]] == ["FM-1", "FM-3", "FM-4", "FM-6"]


@pytest.mark.django_db
def test_impact_takes_four_queries_whatever_it_touched(world, django_assert_num_queries):
    with django_assert_num_queries(4):
        decision_impact(world["d1"])
    for _ in range(3):
        world["flow"].done(spec=world["spec"])

    with django_assert_num_queries(4):
        impact = decision_impact(world["d1"])

    assert len(impact["approvals_without"]) == 5


# --- The page -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_decision_page_shows_what_it_changed(world, client):
    client.force_login(world["flow"].agent)

    response = client.get("/decisions/FM-D1/")

    page = response.content.decode()
    assert response.status_code == 200
    assert "What it changed" in page
    assert '<tr class="del"><td>-# Spec</td></tr>' in page
    assert '<tr class="add"><td>+# Spec v2</td></tr>' in page
    assert 'href="/specs/FM-S1/?a=1&amp;b=2"' in page
    assert "Approvals judged while it was in force" in page
    assert 'href="/tasks/FM-3/?attempt=1"' in page
    assert "Approvals of those tasks judged without it" in page
    assert "style=" not in page


@pytest.mark.django_db
def test_a_proposed_decisions_page_says_its_amendments_wait_for_acceptance(world, client):
    client.force_login(world["flow"].agent)

    page = client.get("/decisions/FM-D3/").content.decode()

    assert "None yet: its amendments become versions when it is accepted." in page


@pytest.mark.django_db
def test_the_decision_page_takes_the_same_queries_for_few_or_many_approvals(world, client):
    client.force_login(world["flow"].agent)
    with CaptureQueriesContext(connection) as few:
        client.get("/decisions/FM-D1/")
    for _ in range(3):
        world["flow"].done(spec=world["spec"])

    with CaptureQueriesContext(connection) as many:
        response = client.get("/decisions/FM-D1/")

    assert len(response.context["impact"]["approvals_without"]) == 5
    assert len(many) == len(few)


@pytest.mark.django_db
def test_the_spec_page_still_compares_any_two_versions(world, client):
    client.force_login(world["flow"].agent)

    response = client.get("/specs/FM-S1/", {"a": "1", "b": "2"})

    assert response.status_code == 200
    assert '<tr class="add"><td>+# Spec v2</td></tr>' in response.content.decode()
    assert [c["key"] for c in response.context["criteria_changes"]] == ["AC-1", "AC-4", "AC-2"]


# --- The API ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_api_answers_a_member_the_same_impact(world, api):
    response = api(world["flow"].agent).get("/api/v1/decisions/FM-D1/impact/")

    body = response.json()
    assert response.status_code == 200
    assert (body["decision"], body["state"]) == ("FM-D1", "superseded")
    assert body["amended"][0]["body_diff"][3:] == [["del", "-# Spec"], ["add", "+# Spec v2"]]
    assert body["amended"][0]["criteria_changes"][1] == {
        "change": "added",
        "key": "AC-4",
        "before": None,
        "after": {"text": "Claims are fast.", "proof": {"check": "review"}},
    }
    assert [t["task"] for t in body["tasks"]] == ["FM-1", "FM-2", "FM-3", "FM-4", "FM-6"]
    assert [a["task"] for a in body["approvals"]] == ["FM-3", "FM-2"]
    assert [a["task"] for a in body["approvals_without"]] == ["FM-1", "FM-6"]


@pytest.mark.django_db
def test_the_api_hides_another_projects_decision(world, api):
    response = api(world["other"].manager).get("/api/v1/decisions/FM-D1/impact/")

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


@pytest.mark.django_db
def test_the_api_takes_the_same_queries_for_few_or_many_approvals(world, api):
    client = api(world["flow"].agent)
    with CaptureQueriesContext(connection) as few:
        client.get("/api/v1/decisions/FM-D1/impact/")
    for _ in range(3):
        world["flow"].done(spec=world["spec"])

    with CaptureQueriesContext(connection) as many:
        response = client.get("/api/v1/decisions/FM-D1/impact/")

    assert len(response.json()["approvals_without"]) == 5
    assert len(many) == len(few)
