"""Requests that try to set what only the server decides, and tokens that must no longer work.

A caller never sets state, keys, numbers, counters, leases, provenance, hashes or owners:
each row below sends one such field with a plausible hostile value and asserts that the
stored value is the one the server decided. (Refusing the field with a 400 ``invalid`` that
changes nothing would be right too; silently honouring it never is.) Then: an expired token,
a revoked token and the token of a deactivated user get 401 on every operation of the schema.
"""

import hashlib
import json
from datetime import timedelta

import pytest
from django.utils import timezone
from knox.models import AuthToken
from rest_framework.test import APIClient

from decisions.models import Decision, Spec, SpecVersion
from evidence.models import Evidence
from projects.models import Membership, Project
from projects.roles import Role
from tasks.models import Attempt, Task
from tests.factories import CRITERIA
from tests.test_hostile_inputs import (
    BEADS_LINE,
    MULTIPART,
    Snapshot,
    World,
    assert_refused,
    multipart,
    post_upload,
    schema_operations,
    upload_body,
)

PAST = "2000-01-01T00:00:00Z"
FUTURE = "2999-01-01T00:00:00Z"


@pytest.fixture
def world(db):
    return World()


def call(world, api, role, method, path, body):
    client = world.client(api, role)
    return getattr(client, method)(path, body, format="json")


def honoured_or_refused(response, before, settings, status: int) -> bool:
    """True when the request was carried out (its status); a 400 must then change nothing."""
    if response.status_code == 400:
        assert_refused(response, 400, "invalid")
        before.assert_unchanged(settings)
        return False
    assert response.status_code == status, response.content[:500]
    return True


def recent(moment) -> bool:
    return abs(timezone.now() - moment) < timedelta(minutes=1)


# --- Tasks --------------------------------------------------------------------------------

# field, hostile value (a function of the world)
TASK_FIELDS = [
    ("state", lambda w: "done"),
    ("key", lambda w: "FM-999"),
    ("number", lambda w: 999),
    ("attempt_count", lambda w: 7),
    ("failed_attempts", lambda w: 7),
    ("current_attempt", lambda w: w.attempt.pk),
    ("current_attempt_id", lambda w: w.attempt.pk),
    ("created_by", lambda w: w.flow.agent.pk),
    ("created_by_id", lambda w: w.flow.agent.pk),
    ("holder", lambda w: w.flow.agent.pk),
    ("created_at", lambda w: PAST),
    ("id", lambda w: w.task.pk),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "value"), TASK_FIELDS, ids=[f for f, _ in TASK_FIELDS])
def test_task_create_decides_what_the_caller_may_not(world, api, settings, name, value):
    number = Project.objects.get(slug="FM").task_seq + 1
    before = Snapshot.take(settings)

    response = call(
        world,
        api,
        "manager",
        "post",
        "/api/v1/tasks/",
        {"project": "FM", "title": "new", name: value(world)},
    )

    if honoured_or_refused(response, before, settings, 201):
        task = Task.objects.get(key=response.json()["key"])
        assert (task.key, task.number, task.state) == (f"FM-{number}", number, "draft")
        assert (task.attempt_count, task.failed_attempts, task.current_attempt_id) == (0, 0, None)
        assert (task.created_by_id, task.project.slug) == (world.flow.manager.pk, "FM")
        assert recent(task.created_at)
        assert Task.objects.get(pk=world.task.pk).title == world.task.title


PATCH_FIELDS = [
    *TASK_FIELDS,
    ("project", lambda w: "OT"),
    ("project_id", lambda w: w.other.project.pk),
    ("updated_at", lambda w: PAST),
]

# What a PATCH leaves alone: everything but the title it really changes and updated_at.
KEPT_BY_PATCH = [
    "key",
    "number",
    "state",
    "attempt_count",
    "failed_attempts",
    "current_attempt_id",
    "created_by_id",
    "created_at",
    "project_id",
]


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "value"), PATCH_FIELDS, ids=[f for f, _ in PATCH_FIELDS])
def test_task_patch_changes_only_what_a_manager_may_edit(world, api, settings, name, value):
    task = world.draft
    kept = {f: getattr(task, f) for f in KEPT_BY_PATCH}
    before = Snapshot.take(settings)

    response = call(
        world,
        api,
        "manager",
        "patch",
        f"/api/v1/tasks/{task.key}/",
        {"title": "renamed", name: value(world)},
    )

    if honoured_or_refused(response, before, settings, 200):
        task.refresh_from_db()
        assert task.title == "renamed"
        assert {f: getattr(task, f) for f in KEPT_BY_PATCH} == kept
        assert recent(task.updated_at)


@pytest.mark.django_db
def test_publish_ignores_a_state_in_the_body(world, api):
    response = call(
        world,
        api,
        "manager",
        "post",
        f"/api/v1/tasks/{world.draft.key}/publish/",
        {"state": "done", "reason": "go"},
    )

    assert (response.status_code, response.json()["state"]) == (200, "ready")
    assert Task.objects.get(pk=world.draft.pk).state == "ready"


# --- Claim, heartbeat, checkpoint, release, submit, review ----------------------------------

CLAIM_FIELDS = [
    ("agent", lambda w: w.flow.agent2.username),
    ("agent_id", lambda w: w.flow.agent2.pk),
    ("attempt", lambda w: {"number": 9, "state": "passed", "agent": w.flow.agent2.pk}),
    ("number", lambda w: 9),
    ("state", lambda w: "passed"),
    ("lease_expires_at", lambda w: FUTURE),
    ("heartbeat_at", lambda w: FUTURE),
    ("spec_version", lambda w: w.draft_version.pk),
    ("task", lambda w: w.draft.key),
    ("checkpoint", lambda w: {"resume": "elsewhere"}),
    ("checkpoint_revision", lambda w: 9),
    ("idempotency_key", lambda w: "k"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "value"), CLAIM_FIELDS, ids=[f for f, _ in CLAIM_FIELDS])
def test_a_claim_gets_the_agent_lease_and_attempt_the_server_decides(
    world, api, settings, name, value
):
    before = Snapshot.take(settings)

    response = call(
        world,
        api,
        "agent",
        "post",
        "/api/v1/tasks/claim/",
        {"project": "FM", name: value(world)},
    )

    if honoured_or_refused(response, before, settings, 201):
        attempt = Attempt.objects.get(pk=response.json()["attempt"]["id"])
        assert (attempt.task_id, attempt.agent_id) == (world.ready.pk, world.flow.agent.pk)
        assert (attempt.number, attempt.state, attempt.spec_version_id) == (1, "running", None)
        assert (attempt.checkpoint, attempt.checkpoint_revision, attempt.idempotency_key) == (
            None,
            0,
            "",
        )
        lease = attempt.lease_expires_at - timezone.now()
        assert timedelta(seconds=290) < lease <= timedelta(seconds=300)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "extra",
    [
        {"lease_expires_at": FUTURE},
        {"heartbeat_at": PAST},
        {"agent": "ot-agent"},
        {"state": "passed"},
        {"attempt": 1},
    ],
    ids=lambda extra: next(iter(extra)),
)
def test_a_heartbeat_extends_the_lease_by_lease_seconds_only(world, api, extra):
    response = call(
        world,
        api,
        "agent",
        "post",
        f"/api/v1/attempts/{world.attempt.pk}/heartbeat/",
        {"lease_seconds": 60, **extra},
    )

    assert response.status_code == 200, response.content[:300]
    attempt = Attempt.objects.get(pk=world.attempt.pk)
    lease = attempt.lease_expires_at - timezone.now()
    assert timedelta(seconds=50) < lease <= timedelta(seconds=60)
    assert (attempt.agent_id, attempt.state, recent(attempt.heartbeat_at)) == (
        world.flow.agent.pk,
        "running",
        True,
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    "extra",
    [{"checkpoint_revision": 99}, {"checkpoint_at": PAST}, {"checkpoint": {"b": 2}}],
    ids=lambda extra: next(iter(extra)),
)
def test_a_checkpoint_revision_counts_from_the_server(world, api, extra):
    response = call(
        world,
        api,
        "agent",
        "put",
        f"/api/v1/attempts/{world.attempt.pk}/checkpoint/",
        {"data": {"a": 1}, "revision": 0, **extra},
    )

    assert response.status_code == 200, response.content[:300]
    attempt = Attempt.objects.get(pk=world.attempt.pk)
    assert (attempt.checkpoint, attempt.checkpoint_revision) == ({"a": 1}, 1)
    assert recent(attempt.checkpoint_at)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "extra",
    [
        {"state": "approved"},
        {"end_reason": "forged"},
        {"agent": "fm-agent2"},
        {"ended_at": PAST},
        {"task_state": "done"},
    ],
    ids=lambda extra: next(iter(extra)),
)
def test_a_release_ends_the_attempt_the_way_release_does(world, api, extra):
    response = call(
        world,
        api,
        "agent",
        "post",
        f"/api/v1/attempts/{world.attempt.pk}/release/",
        {"reason": "back", **extra},
    )

    assert response.status_code == 200, response.content[:300]
    attempt = Attempt.objects.select_related("task").get(pk=world.attempt.pk)
    assert (attempt.state, attempt.end_reason, attempt.agent_id) == (
        "released",
        "back",
        world.flow.agent.pk,
    )
    assert (attempt.task.state, recent(attempt.ended_at)) == ("ready", True)


@pytest.mark.django_db
def test_submit_takes_state_and_agent_from_the_server_and_the_key_from_the_header_only(world, api):
    forged = {
        "summary": "done",
        "state": "approved",
        "agent": world.flow.agent2.pk,
        "idempotency_key": "k-1",
        "submitted_at": PAST,
        "reviewed_by": world.flow.reviewer.pk,
    }
    client = world.client(api, "agent")
    path = f"/api/v1/attempts/{world.attempt.pk}/submit/"

    first = client.post(path, forged, format="json")
    again = client.post(path, forged, format="json", HTTP_IDEMPOTENCY_KEY="k-1")

    assert first.status_code == 202, first.content[:300]
    attempt = Attempt.objects.get(pk=world.attempt.pk)
    assert (attempt.state, attempt.agent_id, attempt.reviewed_by_id) == (
        "checking",
        world.flow.agent.pk,
        None,
    )
    assert (attempt.idempotency_key, recent(attempt.submitted_at)) == ("", True)
    # The body's key was never recorded, so the same key in the header is no replay.
    assert_refused(again, 409, "invalid_state")


@pytest.mark.django_db
@pytest.mark.parametrize(
    "extra",
    [
        {"by": "fm-manager"},
        {"reviewed_by": "MANAGER"},
        {"reviewer": "MANAGER"},
        {"state": "rejected"},
        {"end_reason": "forged"},
    ],
    ids=lambda extra: next(iter(extra)),
)
def test_a_review_is_recorded_as_the_callers_own(world, api, extra):
    extra = {k: world.flow.manager.pk if v == "MANAGER" else v for k, v in extra.items()}

    response = call(
        world,
        api,
        "reviewer",
        "post",
        f"/api/v1/tasks/{world.review_task.key}/review/",
        {"verdict": "approve", "reason": "fine", **extra},
    )

    assert response.status_code == 200, response.content[:300]
    attempt = Attempt.objects.select_related("task").get(pk=world.review_attempt.pk)
    assert (attempt.state, attempt.reviewed_by_id, attempt.end_reason) == (
        "approved",
        world.flow.reviewer.pk,
        "fine",
    )
    assert attempt.task.state == "done"


# --- Evidence -----------------------------------------------------------------------------

CONTENT = b"a line of log\n"
EVIDENCE_FIELDS = [
    ("provenance", lambda w: "verifier"),
    ("provenance", lambda w: "gate"),
    ("authoritative", lambda w: "true"),
    ("sha256", lambda w: "0" * 64),
    ("sha256", lambda w: hashlib.sha256(b"other bytes").hexdigest()),
    ("size", lambda w: "1"),
    ("uploaded_by", lambda w: str(w.flow.verifier.pk)),
    ("attempt", lambda w: str(w.review_attempt.pk)),
    ("attempt_id", lambda w: str(w.review_attempt.pk)),
    ("name", lambda w: "../../forged.log"),
    ("file", lambda w: "evidence/00/00/forged"),
    ("created_at", lambda w: PAST),
    ("summary", lambda w: '{"lines": 999}'),
]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "value"),
    EVIDENCE_FIELDS,
    ids=[f"{f}-{n}" for n, (f, _) in enumerate(EVIDENCE_FIELDS)],
)
def test_agent_evidence_gets_provenance_hash_size_owner_and_attempt_from_the_server(
    world, api, settings, name, value
):
    before = Snapshot.take(settings)

    response = post_upload(
        world.client(api, "agent"),
        world.attempt,
        multipart(
            [("kind", "log"), (name, value(world))], [("file", "run.log", CONTENT, "text/plain")]
        ),
    )

    if honoured_or_refused(response, before, settings, 201):
        evidence = Evidence.objects.get(pk=response.json()["id"])
        assert (evidence.provenance, evidence.authoritative) == ("agent", False)
        assert (evidence.sha256, evidence.size) == (
            hashlib.sha256(CONTENT).hexdigest(),
            len(CONTENT),
        )
        assert (evidence.attempt_id, evidence.uploaded_by_id) == (
            world.attempt.pk,
            world.flow.agent.pk,
        )
        assert (evidence.name, evidence.file.name) == (
            "run.log",
            f"evidence/{evidence.sha256[:2]}/{evidence.sha256[2:4]}/{evidence.sha256}",
        )
        assert (evidence.summary, recent(evidence.created_at)) == ({"lines": 1}, True)
        assert Evidence.objects.filter(attempt=world.review_attempt).count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("role", "claimed", "provenance"),
    [
        ("verifier", "gate", "verifier"),
        ("verifier", "agent", "verifier"),
        ("reviewer", "verifier", "human"),
        ("manager", "gate", "human"),
    ],
)
def test_provenance_follows_the_uploader_not_the_form(world, api, role, claimed, provenance):
    response = post_upload(
        world.client(api, role), world.attempt, upload_body("log", CONTENT, provenance=claimed)
    )

    assert response.status_code == 201, response.content[:300]
    assert response.json()["provenance"] == provenance
    assert Evidence.objects.get(pk=response.json()["id"]).uploaded_by == getattr(world.flow, role)


@pytest.mark.django_db
def test_an_agent_who_is_also_a_verifier_cannot_certify_its_own_attempt(world, api):
    Membership.objects.create(user=world.flow.agent, project=world.flow.project, role=Role.VERIFIER)

    response = post_upload(
        world.client(api, "agent"),
        world.attempt,
        upload_body("log", CONTENT, provenance="verifier", authoritative="true"),
    )

    assert response.status_code == 201, response.content[:300]
    assert (response.json()["provenance"], response.json()["authoritative"]) == ("agent", False)


# --- Decisions and specs ----------------------------------------------------------------------

DECISION_FIELDS = [
    ("state", lambda w: "accepted"),
    ("decided_by", lambda w: w.flow.manager.username),
    ("decided_by_id", lambda w: w.flow.manager.pk),
    ("decided_at", lambda w: PAST),
    ("verdict_reason", lambda w: "accepted long ago"),
    ("proposed_by", lambda w: w.flow.agent2.username),
    ("proposed_by_id", lambda w: w.flow.agent2.pk),
    ("proposed_in", lambda w: w.attempt.pk),
    ("key", lambda w: "FM-D99"),
    ("number", lambda w: 99),
    ("superseded_by", lambda w: [w.decision.key]),
    ("created_at", lambda w: PAST),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "value"), DECISION_FIELDS, ids=[f for f, _ in DECISION_FIELDS])
def test_a_proposed_decision_is_the_callers_and_only_proposed(world, api, settings, name, value):
    before = Snapshot.take(settings)

    response = call(
        world,
        api,
        "reviewer",
        "post",
        "/api/v1/decisions/",
        {"project": "FM", "title": "t", "context": "c", "decision": "d", name: value(world)},
    )

    if honoured_or_refused(response, before, settings, 201):
        decision = Decision.objects.get(key=response.json()["key"])
        assert (decision.key, decision.number, decision.state) == ("FM-D2", 2, "proposed")
        assert (decision.proposed_by_id, decision.proposed_in_id) == (world.flow.reviewer.pk, None)
        assert (decision.decided_by_id, decision.decided_at, decision.verdict_reason) == (
            None,
            None,
            "",
        )
        assert list(decision.superseded_by.all()) == []
        assert recent(decision.created_at)
        assert Decision.objects.get(pk=world.decision.pk).state == "proposed"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "extra",
    [
        {"proposed_by": "fm-manager"},
        {"proposed_in": "REVIEW_ATTEMPT"},
        {"state": "accepted"},
        {"project": "OT"},
        {"decided_by": "fm-manager"},
    ],
    ids=lambda extra: next(iter(extra)),
)
def test_a_decision_proposed_in_an_attempt_belongs_to_that_attempt(world, api, extra):
    extra = {k: world.review_attempt.pk if v == "REVIEW_ATTEMPT" else v for k, v in extra.items()}

    response = call(
        world,
        api,
        "agent",
        "post",
        f"/api/v1/attempts/{world.attempt.pk}/decisions/",
        {"title": "t", "context": "c", "decision": "d", **extra},
    )

    assert response.status_code == 201, response.content[:300]
    decision = Decision.objects.get(key=response.json()["key"])
    assert (decision.proposed_by_id, decision.proposed_in_id) == (
        world.flow.agent.pk,
        world.attempt.pk,
    )
    assert (decision.state, decision.project.slug, decision.decided_by_id) == (
        "proposed",
        "FM",
        None,
    )


VERSION_FIELDS = [
    ("state", lambda w: "accepted"),
    ("number", lambda w: 99),
    ("author", lambda w: w.flow.agent.pk),
    ("source_decision", lambda w: w.decision.key),
    ("accepted_at", lambda w: PAST),
    ("spec", lambda w: "OT-S1"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "value"), VERSION_FIELDS, ids=[f for f, _ in VERSION_FIELDS])
def test_a_new_spec_version_is_the_next_draft(world, api, settings, name, value):
    before = Snapshot.take(settings)

    response = call(
        world,
        api,
        "manager",
        "post",
        f"/api/v1/specs/{world.spec.key}/versions/",
        {"body": "v3", "criteria": CRITERIA, name: value(world)},
    )

    if honoured_or_refused(response, before, settings, 201):
        version = SpecVersion.objects.get(spec=world.spec, number=response.json()["number"])
        assert (version.number, version.state, version.accepted_at) == (3, "draft", None)
        assert (version.author_id, version.source_decision_id) == (world.flow.manager.pk, None)
        current = SpecVersion.objects.get(spec=world.spec, state="accepted")
        assert current.number == 1


SPEC_FIELDS = [
    ("key", lambda w: "FM-S99"),
    ("number", lambda w: 99),
    ("state", lambda w: "accepted"),
    ("created_by", lambda w: w.flow.agent.pk),
    ("current_version", lambda w: 1),
    ("versions", lambda w: [{"number": 1, "state": "accepted"}]),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "value"), SPEC_FIELDS, ids=[f for f, _ in SPEC_FIELDS])
def test_a_new_spec_gets_its_key_and_a_draft_first_version(world, api, settings, name, value):
    before = Snapshot.take(settings)

    response = call(
        world,
        api,
        "manager",
        "post",
        "/api/v1/specs/",
        {"project": "FM", "title": "t", "body": "b", "criteria": CRITERIA, name: value(world)},
    )

    if honoured_or_refused(response, before, settings, 201):
        spec = Spec.objects.get(key=response.json()["key"])
        assert (spec.key, spec.number, spec.created_by_id) == ("FM-S2", 2, world.flow.manager.pk)
        assert list(spec.versions.values_list("number", "state")) == [(1, "draft")]


PROJECT_FIELDS = [
    ("slug", lambda w: "XX"),
    ("task_seq", lambda w: 0),
    ("spec_seq", lambda w: 0),
    ("decision_seq", lambda w: 0),
    ("created_at", lambda w: PAST),
    ("members", lambda w: [w.other.agent.pk]),
    ("my_roles", lambda w: ["agent", "verifier", "reviewer", "manager"]),
    ("id", lambda w: w.other.project.pk),
]
KEPT_BY_PROJECT_PATCH = ["slug", "task_seq", "spec_seq", "decision_seq", "created_at", "id"]


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "value"), PROJECT_FIELDS, ids=[f for f, _ in PROJECT_FIELDS])
def test_a_project_patch_never_touches_its_slug_or_counters(world, api, settings, name, value):
    project = world.flow.project
    project.refresh_from_db()
    kept = {f: getattr(project, f) for f in KEPT_BY_PROJECT_PATCH}
    members = set(Membership.objects.values_list("user_id", "project_id", "role"))
    before = Snapshot.take(settings)

    response = call(
        world,
        api,
        "manager",
        "patch",
        "/api/v1/projects/FM/",
        {"name": "Renamed", name: value(world)},
    )

    if honoured_or_refused(response, before, settings, 200):
        project.refresh_from_db()
        assert project.name == "Renamed"
        assert {f: getattr(project, f) for f in KEPT_BY_PROJECT_PATCH} == kept
        assert set(Membership.objects.values_list("user_id", "project_id", "role")) == members
        assert response.json()["my_roles"] == ["manager"]


# --- Tokens that must no longer work -----------------------------------------------------------


OPERATIONS = schema_operations()

# A body each write would accept from the right caller, so a 401 is the token's doing alone.
BODIES = {
    ("POST", "/api/v1/tasks/claim/"): {"project": "FM"},
    ("POST", "/api/v1/tasks/"): {"project": "FM", "title": "t"},
    ("PATCH", "/api/v1/tasks/{key}/"): {"title": "t"},
    ("POST", "/api/v1/tasks/{key}/review/"): {"verdict": "approve"},
    ("PATCH", "/api/v1/projects/{slug}/"): {"name": "n"},
    ("PUT", "/api/v1/attempts/{attempt_id}/checkpoint/"): {"data": {"a": 1}, "revision": 0},
    ("POST", "/api/v1/attempts/{attempt_id}/submit/"): {"summary": "s"},
    ("POST", "/api/v1/attempts/{attempt_id}/decisions/"): {
        "title": "t",
        "context": "c",
        "decision": "d",
    },
    ("POST", "/api/v1/specs/"): {"project": "FM", "title": "t", "body": "b", "criteria": CRITERIA},
    ("POST", "/api/v1/specs/{key}/versions/"): {"body": "b", "criteria": CRITERIA},
    ("POST", "/api/v1/decisions/"): {
        "project": "FM",
        "title": "t",
        "context": "c",
        "decision": "d",
    },
    ("POST", "/api/v1/decisions/{key}/reject/"): {"reason": "r"},
    ("POST", "/api/v1/projects/{slug}/webhooks/"): {"url": "http://127.0.0.1:9/hook"},
    ("PATCH", "/api/v1/projects/{slug}/webhooks/{id}/"): {"description": "d"},
    ("POST", "/api/v1/attempts/{attempt_id}/comments/"): {"path": "x.py", "line": 1, "body": "b"},
}


def fill(world, method: str, template: str) -> str:
    """The operation's path with real keys and ids of the world, each in a state it accepts."""
    task = world.task
    if template.endswith(("/review/",)):
        task = world.review_task
    elif template.endswith("/publish/") or method == "PATCH":
        task = world.draft
    elif template.endswith(("/cancel/",)):
        task = world.ready
    key = {
        "/api/v1/tasks/": task.key,
        "/api/v1/specs/": world.spec.key,
        "/api/v1/decisions/": world.decision.key,
    }
    prefix = next((p for p in key if template.startswith(p + "{")), None)
    path = template.replace("{key}", key[prefix]) if prefix else template
    number = "2" if template.endswith("/accept/") and "/specs/" in template else "1"
    attempt = world.commented if "/comments/" in template else world.attempt
    return (
        path.replace("{attempt_id}", str(attempt.pk))
        .replace("{comment_id}", str(world.comment.pk))
        .replace("{evidence_id}", str(world.evidence.pk))
        .replace("{slug}", "FM")
        .replace("{number}", number)
        .replace("{id}", str(world.subscription.pk))
        .replace("{delivery}", str(world.delivery.pk))
        .replace("{run_id}", str(world.import_run.pk))
        .replace("{export_format}", "madr")
    )


def caller_for(world, method: str, template: str):
    """Who would be allowed to make the call with a live token."""
    if "/comments/" in template and method == "POST":
        return world.flow.reviewer
    if template == "/api/v1/tasks/claim/" or (
        "{attempt_id}" in template and method != "GET" and not template.endswith("/evidence/")
    ):
        return world.flow.agent
    if template.endswith("/review/"):
        return world.flow.reviewer
    return world.flow.manager


def request(world, client, method: str, template: str):
    path = fill(world, method, template)
    if method == "POST" and template.endswith("/evidence/"):
        return post_upload(client, world.attempt, upload_body())
    if method == "POST" and template.endswith("/imports/"):
        return client.generic(
            "POST",
            path,
            data=multipart([("format", "beads")], [("file", "i.jsonl", BEADS_LINE, "text/plain")]),
            content_type=MULTIPART,
        )
    body = BODIES.get((method, template), {})
    if method == "GET":
        return client.get(path)
    return client.generic(
        method, path, data=json.dumps(body).encode(), content_type="application/json"
    )


def dead_token(world, user, how: str) -> str:
    row, token = AuthToken.objects.create(user=user)
    if how == "expired":
        AuthToken.objects.filter(pk=row.pk).update(expiry=timezone.now() - timedelta(seconds=1))
    elif how == "revoked":
        AuthToken.objects.filter(pk=row.pk).delete()
    elif how == "user-deactivated":
        type(user).objects.filter(pk=user.pk).update(is_active=False)
    return token


@pytest.fixture
def world_with_evidence(world):
    world.evidence = world.flow.attach(world.attempt)
    return world


@pytest.mark.django_db
@pytest.mark.parametrize("how", ["expired", "revoked", "user-deactivated"])
@pytest.mark.parametrize(
    ("method", "template"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS]
)
def test_a_dead_token_gets_401_on_every_operation_and_changes_nothing(
    world_with_evidence, settings, method, template, how
):
    world = world_with_evidence
    client = APIClient()
    client.raise_request_exception = False
    client.credentials(
        HTTP_AUTHORIZATION=f"Bearer {dead_token(world, caller_for(world, method, template), how)}"
    )
    before = Snapshot.take(settings)

    response = request(world, client, method, template)

    assert_refused(response, 401, "authentication_failed")
    assert response["WWW-Authenticate"].startswith("Bearer")
    before.assert_unchanged(settings)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("method", "template"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS]
)
def test_a_live_token_of_the_same_caller_gets_through(world_with_evidence, method, template):
    """The control group: with a live token the same caller passes authentication and its role
    check (unblock and reopen then meet a task in the wrong state: 409)."""
    world = world_with_evidence
    client = APIClient()
    client.raise_request_exception = False
    _, token = AuthToken.objects.create(user=caller_for(world, method, template))
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")

    response = request(world, client, method, template)

    expected = 409 if template.endswith(("/unblock/", "/reopen/")) else None
    assert response.status_code == expected or 200 <= response.status_code < 300, response.content[
        :300
    ]


def test_every_operation_of_the_schema_is_walked():
    """48 operations today (tests/authz_matrix.tsv has one row each); a new one joins by itself."""
    assert len(OPERATIONS) == 52
    assert {method for method, _ in OPERATIONS} == {"GET", "POST", "PUT", "PATCH", "DELETE"}


@pytest.mark.django_db
def test_a_deactivated_user_loses_every_token_at_once(world, api):
    user = world.flow.manager
    live = [AuthToken.objects.create(user=user)[1] for _ in range(2)]
    type(user).objects.filter(pk=user.pk).update(is_active=False)

    statuses = []
    for token in live:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        statuses.append(client.get("/api/v1/projects/").status_code)

    assert statuses == [401, 401]
