"""The task and attempt endpoints of the agent API."""

import pytest
from django.utils import timezone

from projects.models import Event
from tasks import attempts
from tasks.models import Attempt, Task
from tasks.review import task_reject
from tests.factories import expire_lease


def counts():
    return (Task.objects.count(), Attempt.objects.count(), Event.objects.count())


@pytest.mark.django_db
def test_claim_answers_201_with_the_task_and_the_lease(flow, api):
    task = flow.ready(title="Claim me", labels=["backend"], allowed_paths=["tasks/**"])

    response = api(flow.agent).post("/api/v1/tasks/claim/", {"lease_seconds": 120}, format="json")

    assert response.status_code == 201
    body = response.json()
    assert body["task"]["key"] == task.key
    assert (body["task"]["state"], body["task"]["labels"], body["task"]["allowed_paths"]) == (
        "claimed",
        ["backend"],
        ["tasks/**"],
    )
    assert (body["attempt"]["number"], body["attempt"]["state"], body["attempt"]["agent"]) == (
        1,
        "running",
        flow.agent.username,
    )
    assert body["attempt"][
        "lease_expires_at"
    ] == Attempt.objects.get().lease_expires_at.isoformat().replace("+00:00", "Z")


@pytest.mark.django_db
def test_claim_answers_204_when_nothing_is_claimable(flow, api):
    response = api(flow.agent).post("/api/v1/tasks/claim/", {}, format="json")

    assert (response.status_code, response.content) == (204, b"")


@pytest.mark.django_db
def test_claim_with_a_lease_out_of_bounds_is_400_naming_the_field(flow, api):
    flow.ready()
    before = counts()

    response = api(flow.agent).post("/api/v1/tasks/claim/", {"lease_seconds": 99999}, format="json")

    assert response.status_code == 400
    assert response.json()["code"] == "invalid"
    assert response.json()["fields"] == {
        "lease_seconds": ["must be a whole number of seconds from 1 to 3600"]
    }
    assert counts() == before


@pytest.mark.django_db
def test_claim_in_another_project_is_404(flow, other_flow, api):
    other_flow.ready()

    response = api(flow.agent).post("/api/v1/tasks/claim/", {"project": "OT"}, format="json")

    assert (response.status_code, response.json()["code"]) == (404, "not_found")
    assert Attempt.objects.count() == 0


@pytest.mark.django_db
def test_claim_by_a_reviewer_is_403(flow, api):
    flow.ready()

    response = api(flow.reviewer).post("/api/v1/tasks/claim/", {}, format="json")

    assert (response.status_code, response.json()["code"]) == (403, "permission_denied")
    assert Attempt.objects.count() == 0


@pytest.mark.django_db
def test_anonymous_and_bad_tokens_are_401(flow, api):
    flow.ready()
    bad = api()
    bad.credentials(HTTP_AUTHORIZATION="Bearer fm_not-a-real-token")

    for client in (api(), bad):
        response = client.post("/api/v1/tasks/claim/", {}, format="json")
        assert response.status_code == 401
        assert response.json()["code"] in ("not_authenticated", "authentication_failed")
    assert Attempt.objects.count() == 0


@pytest.mark.django_db
def test_an_expired_token_is_401(flow, api):
    from knox.models import AuthToken
    from rest_framework.test import APIClient

    row, token = AuthToken.objects.create(user=flow.agent)
    AuthToken.objects.filter(pk=row.pk).update(
        expiry=timezone.now() - timezone.timedelta(seconds=1)
    )
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")

    response = client.get("/api/v1/tasks/")

    assert (response.status_code, response.json()["code"]) == (401, "authentication_failed")


@pytest.mark.django_db
def test_malformed_json_is_400_and_changes_nothing(flow, api):
    flow.ready()

    response = api(flow.agent).post(
        "/api/v1/tasks/claim/", '{"lease_seconds": ', content_type="application/json"
    )

    assert (response.status_code, response.json()["code"]) == (400, "parse_error")
    assert Attempt.objects.count() == 0


@pytest.mark.django_db
def test_task_list_shows_only_my_projects_and_filters(flow, other_flow, api):
    ready = flow.ready(title="r", labels=["ui"])
    flow.draft(title="d")
    other_flow.ready()

    client = api(flow.reviewer)
    everything = client.get("/api/v1/tasks/").json()["results"]
    filtered = client.get(
        "/api/v1/tasks/", {"state": "ready", "label": "ui", "project": "FM"}
    ).json()["results"]

    assert [t["key"] for t in everything] == ["FM-1", "FM-2"]
    assert [t["key"] for t in filtered] == [ready.key]


@pytest.mark.django_db
def test_task_detail_of_another_project_is_404(flow, other_flow, api):
    theirs = other_flow.draft()

    response = api(flow.manager).get(f"/api/v1/tasks/{theirs.key}/")

    assert (response.status_code, response.json()["code"]) == (404, "not_found")


@pytest.mark.django_db
def test_a_manager_creates_a_draft_task(flow, api):
    spec = flow.spec()
    first = flow.draft()
    payload = {
        "project": "FM",
        "title": "New",
        "spec": spec.key,
        "labels": ["API", "backend"],
        "depends_on": [first.key],
        "allowed_paths": ["tasks/**"],
        "priority": 2,
    }

    response = api(flow.manager).post("/api/v1/tasks/", payload, format="json")

    assert response.status_code == 201
    body = response.json()
    assert (body["key"], body["state"], body["spec"], body["depends_on"]) == (
        "FM-2",
        "draft",
        spec.key,
        [first.key],
    )
    assert body["labels"] == ["api", "backend"]


@pytest.mark.django_db
def test_state_and_keys_cannot_be_set_from_a_request_body(flow, api):
    before = counts()

    response = api(flow.manager).post(
        "/api/v1/tasks/",
        {"project": "FM", "title": "x", "state": "done", "key": "FM-999", "attempt_count": 9},
        format="json",
    )

    assert (response.status_code, response.json()["code"]) == (400, "invalid")
    assert response.json()["fields"] == {
        "attempt_count": ["read-only field"],
        "key": ["read-only field"],
        "state": ["read-only field"],
    }
    assert counts() == before


@pytest.mark.django_db
def test_an_agent_cannot_create_tasks(flow, api):
    before = counts()

    response = api(flow.agent).post(
        "/api/v1/tasks/", {"project": "FM", "title": "x"}, format="json"
    )

    assert (response.status_code, response.json()["code"]) == (403, "permission_denied")
    assert counts() == before


@pytest.mark.django_db
def test_a_manager_edits_a_draft_and_the_edit_is_on_record(flow, api):
    task = flow.draft(title="old")

    response = api(flow.manager).patch(
        f"/api/v1/tasks/{task.key}/", {"title": "new", "labels": ["x"]}, format="json"
    )

    assert response.status_code == 200
    assert (response.json()["title"], response.json()["labels"]) == ("new", ["x"])
    assert Event.objects.filter(task=task, transition="edit").get().extra == {
        "fields": ["labels", "title"]
    }


@pytest.mark.django_db
def test_editing_a_claimed_task_is_409(flow, api):
    task, _ = flow.claimed(title="old")

    response = api(flow.manager).patch(
        f"/api/v1/tasks/{task.key}/", {"title": "new"}, format="json"
    )

    assert (response.status_code, response.json()["code"]) == (409, "invalid_state")
    assert Task.objects.get(pk=task.pk).title == "old"


@pytest.mark.django_db
def test_a_dependency_cycle_is_refused(flow, api):
    first = flow.draft()
    second = flow.draft(depends_on=[first])

    response = api(flow.manager).patch(
        f"/api/v1/tasks/{first.key}/", {"depends_on": [second.key]}, format="json"
    )

    assert response.status_code == 400
    assert "depends_on" in response.json()["fields"]
    assert list(first.depends_on.all()) == []


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("action", "state", "target"),
    [
        ("publish", "draft", "ready"),
        ("cancel", "ready", "cancelled"),
        ("unblock", "blocked", "ready"),
        ("reopen", "failed", "ready"),
    ],
)
def test_manager_actions_answer_with_the_new_state(flow, api, action, state, target):
    task = (
        flow.draft()
        if state == "draft"
        else flow.ready()
        if state == "ready"
        else getattr(flow, state)()[0]
    )

    response = api(flow.manager).post(
        f"/api/v1/tasks/{task.key}/{action}/", {"reason": "r"}, format="json"
    )

    assert (response.status_code, response.json()["state"]) == (200, target)


@pytest.mark.django_db
def test_publishing_twice_is_409_and_writes_nothing(flow, api):
    task = flow.ready()
    events = Event.objects.count()

    response = api(flow.manager).post(f"/api/v1/tasks/{task.key}/publish/", {}, format="json")

    assert (response.status_code, response.json()["code"]) == (409, "invalid_state")
    assert (
        response.json()["detail"]
        == f"{task.key} is ready; 'publish' is not allowed from that state"
    )
    assert Event.objects.count() == events


@pytest.mark.django_db
def test_heartbeat_returns_the_new_lease(flow, api):
    _, attempt = flow.claimed(lease_seconds=10)

    response = api(flow.agent).post(
        f"/api/v1/attempts/{attempt.pk}/heartbeat/", {"lease_seconds": 900}, format="json"
    )

    assert response.status_code == 200
    attempt.refresh_from_db()
    assert response.json()["lease_expires_at"] == attempt.lease_expires_at.isoformat().replace(
        "+00:00", "Z"
    )


@pytest.mark.django_db
def test_heartbeat_after_the_lease_is_lost_is_409_lease_lost(flow, api):
    _, attempt = flow.claimed()
    expire_lease(attempt)

    response = api(flow.agent).post(f"/api/v1/attempts/{attempt.pk}/heartbeat/", {}, format="json")

    assert (response.status_code, response.json()["code"]) == (409, "lease_lost")


@pytest.mark.django_db
def test_checkpoint_put_then_get(flow, api):
    _, attempt = flow.claimed()
    client = api(flow.agent)

    saved = client.put(
        f"/api/v1/attempts/{attempt.pk}/checkpoint/",
        {"data": {"step": 3}, "revision": 0},
        format="json",
    )
    read = client.get(f"/api/v1/attempts/{attempt.pk}/checkpoint/")

    assert (saved.status_code, saved.json()["revision"]) == (200, 1)
    assert (read.json()["data"], read.json()["revision"]) == ({"step": 3}, 1)


@pytest.mark.django_db
def test_a_stale_checkpoint_is_409_with_the_current_revision(flow, api):
    _, attempt = flow.claimed()
    client = api(flow.agent)
    client.put(
        f"/api/v1/attempts/{attempt.pk}/checkpoint/",
        {"data": {"step": 1}, "revision": 0},
        format="json",
    )

    response = client.put(
        f"/api/v1/attempts/{attempt.pk}/checkpoint/",
        {"data": {"step": 0}, "revision": 0},
        format="json",
    )

    assert response.status_code == 409
    assert (response.json()["code"], response.json()["revision"]) == ("checkpoint_conflict", 1)
    assert Attempt.objects.get(pk=attempt.pk).checkpoint == {"step": 1}


@pytest.mark.django_db
def test_submit_is_202_and_a_retry_with_the_key_gets_the_same_answer(flow, api):
    task, attempt = flow.claimed()
    client = api(flow.agent)
    body = {
        "summary": "Did it.",
        "change": {"commit": "abcdef1000000000000000000000000000000000", "branch": "agent/fm-1"},
    }

    first = client.post(
        f"/api/v1/attempts/{attempt.pk}/submit/", body, format="json", HTTP_IDEMPOTENCY_KEY="key-1"
    )
    events = Event.objects.count()
    again = client.post(
        f"/api/v1/attempts/{attempt.pk}/submit/", body, format="json", HTTP_IDEMPOTENCY_KEY="key-1"
    )

    assert (first.status_code, again.status_code) == (202, 202)
    assert first.json() == again.json()
    assert (first.json()["task"], first.json()["state"], first.json()["change"]["commit"]) == (
        task.key,
        "checking",
        "abcdef1000000000000000000000000000000000",
    )
    assert Event.objects.count() == events


@pytest.mark.django_db
def test_submit_answers_the_receipt_and_where_to_follow_it_and_the_model_keeps_no_address(
    flow, api
):
    task, attempt = flow.claimed()
    body = {"summary": "Did it.", "change": {"commit": "abcdef1000000000000000000000000000000000"}}

    answer = api(flow.agent).post(f"/api/v1/attempts/{attempt.pk}/submit/", body, format="json")

    attempt.refresh_from_db()
    assert answer.json() == {
        "attempt": attempt.pk,
        "task": task.key,
        "state": "checking",
        "submitted_at": attempt.submitted_at.isoformat().replace("+00:00", "Z"),
        "summary": "Did it.",
        "change": {"commit": "abcdef1000000000000000000000000000000000"},
        "status_url": f"/api/v1/attempts/{attempt.pk}/",
    }
    assert list(answer.json())[-1] == "status_url"
    assert "status_url" not in attempt.submit_receipt


@pytest.mark.django_db
def test_a_retry_of_a_submission_whose_stored_receipt_kept_the_address_answers_the_same(flow, api):
    _, attempt = flow.claimed()
    client = api(flow.agent)
    body = {"summary": "Did it.", "change": {"commit": "abcdef1000000000000000000000000000000000"}}
    url = f"/api/v1/attempts/{attempt.pk}/submit/"
    first = client.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="key-1").json()
    stored = {**Attempt.objects.get(pk=attempt.pk).submit_receipt, "status_url": "/old/"}
    Attempt.objects.filter(pk=attempt.pk).update(submit_receipt=stored)  # as written before

    again = client.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="key-1")

    # The same answer, not the same bytes: PostgreSQL's jsonb keeps no key order.
    assert (again.status_code, again.json()) == (202, first)


@pytest.mark.django_db
def test_submit_without_a_summary_is_400_and_changes_nothing(flow, api):
    task, attempt = flow.claimed()

    response = api(flow.agent).post(
        f"/api/v1/attempts/{attempt.pk}/submit/", {"change": {"commit": "zz"}}, format="json"
    )

    assert response.status_code == 400
    assert set(response.json()["fields"]) == {"summary", "change"}
    assert Task.objects.get(pk=task.pk).state == "claimed"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "commit", ["c0ffee1234", "main", "c0ffee1234" * 3, "HEAD~1", "c0ffee1234" * 4 + "^{tree}"]
)
def test_a_submission_naming_a_commit_by_anything_but_its_full_id_is_400_and_changes_nothing(
    flow, api, commit
):
    _, attempt = flow.claimed()
    events = Event.objects.count()

    response = api(flow.agent).post(
        f"/api/v1/attempts/{attempt.pk}/submit/",
        {"summary": "Did it.", "change": {"commit": commit}},
        format="json",
    )

    assert response.status_code == 400
    assert response.json()["fields"] == {
        "change": [
            "commit: the commit's full object id: 40 hex digits (64 in a SHA-256 repository), as `git "
            "rev-parse HEAD` prints it; a short id or a branch name can come to mean another commit"
        ]
    }
    attempt.refresh_from_db()
    assert (attempt.state, attempt.change, Event.objects.count()) == ("running", {}, events)


@pytest.mark.django_db
def test_a_full_commit_id_in_capitals_is_kept_in_small_letters(flow, api):
    _, attempt = flow.claimed()

    response = api(flow.agent).post(
        f"/api/v1/attempts/{attempt.pk}/submit/",
        {"summary": "Did it.", "change": {"commit": "C0FFEE" * 6 + "ABCD"}},
        format="json",
    )

    assert (response.status_code, response.json()["change"]) == (
        202,
        {"commit": "c0ffee" * 6 + "abcd"},
    )


@pytest.mark.django_db
def test_the_old_agents_submit_after_its_lease_was_taken_over_is_409(flow, api):
    task, old = flow.claimed()
    expire_lease(old)
    attempts.task_claim(agent=flow.agent2)

    response = api(flow.agent).post(
        f"/api/v1/attempts/{old.pk}/submit/", {"summary": "late"}, format="json"
    )

    assert (response.status_code, response.json()["code"]) == (409, "lease_lost")
    assert Attempt.objects.get(pk=old.pk).state == "abandoned"
    assert Task.objects.get(pk=task.pk).state == "claimed"


@pytest.mark.django_db
def test_release_blocked_needs_a_reason(flow, api):
    task, attempt = flow.claimed()

    response = api(flow.agent).post(
        f"/api/v1/attempts/{attempt.pk}/release/", {"blocked": True}, format="json"
    )

    assert (response.status_code, response.json()["fields"]["reason"]) == (
        400,
        ["say what blocks the task, so a manager can clear it"],
    )
    assert Task.objects.get(pk=task.pk).state == "claimed"


@pytest.mark.django_db
def test_release_gives_the_task_back(flow, api):
    task, attempt = flow.claimed()

    response = api(flow.agent).post(
        f"/api/v1/attempts/{attempt.pk}/release/", {"reason": "not mine"}, format="json"
    )

    assert (response.status_code, response.json()["state"]) == (200, "released")
    assert Task.objects.get(pk=task.pk).state == "ready"


@pytest.mark.django_db
def test_attempt_detail_shows_gate_runs_and_review(flow, api):
    task, attempt = flow.in_review()
    task_reject(task=task, actor=flow.reviewer, reason="no screenshot")

    body = api(flow.manager).get(f"/api/v1/attempts/{attempt.pk}/").json()

    review = body["review"]
    assert (body["state"], review["verdict"], review["by"], review["reason"]) == (
        "rejected",
        "reject",
        flow.reviewer.username,
        "no screenshot",
    )
    assert review["applied"]["commit"] == "abc1230000000000000000000000000000000000"
    assert review["applied_text"].startswith("no spec, no decisions, gates diff-scope queued")
    assert [(r["gate"], r["state"]) for r in body["gate_runs"]] == [
        ("diff-scope", "queued"),
        ("required-evidence", "queued"),
        ("spec-current", "queued"),
        ("tests-pass", "queued"),
    ]


@pytest.mark.django_db
def test_review_approve_and_reject(flow, api):
    first, _ = flow.in_review(title="a")
    second, _ = flow.in_review(title="b")
    client = api(flow.reviewer)

    approved = client.post(
        f"/api/v1/tasks/{first.key}/review/", {"verdict": "approve"}, format="json"
    )
    rejected = client.post(
        f"/api/v1/tasks/{second.key}/review/",
        {"verdict": "reject", "reason": "AC-2"},
        format="json",
    )

    assert (approved.status_code, approved.json()["state"]) == (200, "done")
    assert (rejected.status_code, rejected.json()["state"]) == (200, "ready")


@pytest.mark.django_db
def test_reject_without_a_reason_is_400(flow, api):
    task, _ = flow.in_review()

    response = api(flow.reviewer).post(
        f"/api/v1/tasks/{task.key}/review/", {"verdict": "reject"}, format="json"
    )

    assert (response.status_code, list(response.json()["fields"])) == (400, ["reason"])
    assert Task.objects.get(pk=task.pk).state == "in_review"


@pytest.mark.django_db
def test_an_agent_token_cannot_review(flow, api):
    task, _ = flow.in_review()

    response = api(flow.agent2).post(
        f"/api/v1/tasks/{task.key}/review/", {"verdict": "approve"}, format="json"
    )

    assert (response.status_code, response.json()["code"]) == (403, "permission_denied")
    assert Task.objects.get(pk=task.pk).state == "in_review"


@pytest.mark.django_db
def test_events_list_the_task_timeline_in_order(flow, api):
    task, _ = flow.claimed()

    body = api(flow.reviewer).get(f"/api/v1/tasks/{task.key}/events/").json()

    assert [(e["object"], e["transition"]) for e in body["results"]] == [
        (task.key, "create"),
        (task.key, "publish"),
        (f"{task.key}#1", "start"),
        (task.key, "claim"),
    ]
    assert body["results"][0]["actor"] == flow.manager.username


@pytest.mark.django_db
def test_handoff_answers_the_four_questions(flow, api):
    flow.gates({})
    spec = flow.spec()
    task, attempt = flow.claimed(spec=spec)
    flow.attach(
        attempt,
        b"diff --git a/tasks/x.py b/tasks/x.py\n--- a/tasks/x.py\n+++ b/tasks/x.py\n@@ -1 +1 @@\n-a\n+b\n",
        kind="diff",
        name="c.diff",
    )
    flow.attach(
        attempt,
        b"<testsuite tests='1'><testcase classname='t' name='a'/></testsuite>",
        kind="junit",
        actor=flow.verifier,
        name="j.xml",
        criteria=["AC-1"],
    )
    attempts.attempt_submit(
        attempt=attempt,
        actor=flow.agent,
        summary="Changed x.",
        change={"commit": "abcdef1000000000000000000000000000000000"},
    )

    body = api(flow.reviewer).get(f"/api/v1/tasks/{task.key}/handoff/").json()

    assert body["what_changed"]["summary"] == "Changed x."
    assert body["what_changed"]["files"] == ["tasks/x.py"]
    assert body["why"]["spec"] == {"key": spec.key, "version": 1}
    assert body["what_remains_open"]["next"] == "the gates finish checking the submission"
    assert [c["key"] for c in body["what_remains_open"]["unmet_criteria"]] == ["AC-2", "AC-3"]
    assert [(e["kind"], e["provenance"]) for e in body["authoritative_evidence"]] == [
        ("junit", "verifier")
    ]
