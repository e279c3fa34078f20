"""Requests that try to set what only the server decides about tasks, claims, attempts,
reviews and evidence: state, keys, numbers, counters, leases, provenance, hashes or owners.

Each write refuses a body naming a field it does not write: 400 ``invalid`` whose ``fields``
name it ("read-only field" when the resource shows it, else "unknown field"), and nothing
stored changes. The rows below send one such field with a plausible hostile value.
"""

import hashlib

import pytest

from evidence.models import Evidence
from projects.models import Membership
from projects.roles import Role
from tasks.models import Attempt, Task
from tests.hostile.world import assert_refused, multipart, post_upload, upload_body
from tests.hostile.writes import (
    FUTURE,
    PAST,
    READ_ONLY,
    UNKNOWN,
    Stored,
    attempt_call,
    call,
    refused,
    why,
)

# A field a caller may not write is refused by the serializer before anything is stored, and
# a dead token before any query but its own; the writes themselves run on PostgreSQL in their
# modules' tests (ADR 0015, "engine_neutral").
pytestmark = pytest.mark.engine_neutral


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
# What a task's answer shows that no call writes.
TASK_SHOWN = {
    "key",
    "project",
    "state",
    "attempt_count",
    "failed_attempts",
    "current_attempt",
    "created_at",
    "updated_at",
}


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "value"), TASK_FIELDS, ids=[f for f, _ in TASK_FIELDS])
def test_task_create_refuses_what_the_caller_may_not_set(world, api, settings, name, value):
    before = Stored.take(settings)

    response = call(
        world,
        api,
        "manager",
        "post",
        "/api/v1/tasks/",
        {"project": "FM", "title": "new", name: value(world)},
    )

    refused(response, before, settings, name, why(name, TASK_SHOWN))


PATCH_FIELDS = [
    *TASK_FIELDS,
    ("project", lambda w: "OT"),
    ("project_id", lambda w: w.other.project.pk),
    ("updated_at", lambda w: PAST),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "value"), PATCH_FIELDS, ids=[f for f, _ in PATCH_FIELDS])
def test_task_patch_refuses_what_a_manager_may_not_edit(world, api, settings, name, value):
    before = Stored.take(settings)

    response = call(
        world,
        api,
        "manager",
        "patch",
        f"/api/v1/tasks/{world.draft.key}/",
        {"title": "renamed", name: value(world)},
    )

    refused(response, before, settings, name, why(name, TASK_SHOWN))


@pytest.mark.django_db
def test_a_task_patch_of_state_alone_is_refused_not_ignored(world, api, settings):
    """Issue 23: ``{"state": "done"}`` answered 200 and changed nothing."""
    before = Stored.take(settings)

    response = call(
        world, api, "manager", "patch", f"/api/v1/tasks/{world.ready.key}/", {"state": "done"}
    )

    refused(response, before, settings, "state", READ_ONLY)
    assert Task.objects.get(pk=world.ready.pk).state == "ready"


@pytest.mark.django_db
def test_publish_refuses_a_state_in_the_body(world, api, settings):
    before = Stored.take(settings)

    response = call(
        world,
        api,
        "manager",
        "post",
        f"/api/v1/tasks/{world.draft.key}/publish/",
        {"state": "done", "reason": "go"},
    )

    refused(response, before, settings, "state", UNKNOWN)
    assert Task.objects.get(pk=world.draft.pk).state == "draft"


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
def test_a_claim_refuses_what_the_server_decides(world, api, settings, name, value):
    before = Stored.take(settings)

    response = call(
        world,
        api,
        "agent",
        "post",
        "/api/v1/tasks/claim/",
        {"project": "FM", name: value(world)},
    )

    refused(response, before, settings, name, UNKNOWN)


ATTEMPT_FIELDS = [
    ("heartbeat", "post", {"lease_seconds": 60}, "lease_expires_at", FUTURE, UNKNOWN),
    ("heartbeat", "post", {"lease_seconds": 60}, "heartbeat_at", PAST, UNKNOWN),
    ("heartbeat", "post", {"lease_seconds": 60}, "agent", "ot-agent", UNKNOWN),
    ("heartbeat", "post", {"lease_seconds": 60}, "state", "passed", UNKNOWN),
    ("heartbeat", "post", {"lease_seconds": 60}, "attempt", 1, UNKNOWN),
    ("checkpoint", "put", {"data": {"a": 1}, "revision": 0}, "checkpoint_revision", 99, UNKNOWN),
    ("checkpoint", "put", {"data": {"a": 1}, "revision": 0}, "checkpoint_at", PAST, UNKNOWN),
    ("checkpoint", "put", {"data": {"a": 1}, "revision": 0}, "checkpoint", {"b": 2}, UNKNOWN),
    ("checkpoint", "put", {"data": {"a": 1}, "revision": 0}, "saved_at", PAST, READ_ONLY),
    ("release", "post", {"reason": "back"}, "state", "approved", UNKNOWN),
    ("release", "post", {"reason": "back"}, "end_reason", "forged", UNKNOWN),
    ("release", "post", {"reason": "back"}, "agent", "fm-agent2", UNKNOWN),
    ("release", "post", {"reason": "back"}, "ended_at", PAST, UNKNOWN),
    ("release", "post", {"reason": "back"}, "task_state", "done", UNKNOWN),
    ("submit", "post", {"summary": "done"}, "state", "approved", UNKNOWN),
    ("submit", "post", {"summary": "done"}, "idempotency_key", "k-1", UNKNOWN),
    ("submit", "post", {"summary": "done"}, "submitted_at", PAST, UNKNOWN),
    ("submit", "post", {"summary": "done"}, "reviewed_by", 1, UNKNOWN),
]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("action", "method", "body", "name", "value", "reason"),
    ATTEMPT_FIELDS,
    ids=[f"{row[0]}-{row[3]}" for row in ATTEMPT_FIELDS],
)
def test_the_lease_holders_calls_refuse_what_the_server_decides(
    world, api, settings, action, method, body, name, value, reason
):
    before = Stored.take(settings)

    response = attempt_call(world, api, "agent", method, action, {**body, name: value})

    refused(response, before, settings, name, reason)
    attempt = Attempt.objects.get(pk=world.attempt.pk)
    assert (attempt.state, attempt.checkpoint_revision) == ("running", 0)


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
def test_a_review_refuses_a_reviewer_or_outcome_in_the_body(world, api, settings, extra):
    extra = {k: world.flow.manager.pk if v == "MANAGER" else v for k, v in extra.items()}
    before = Stored.take(settings)

    response = call(
        world,
        api,
        "reviewer",
        "post",
        f"/api/v1/tasks/{world.review_task.key}/review/",
        {"verdict": "approve", "reason": "fine", **extra},
    )

    refused(response, before, settings, next(iter(extra)), UNKNOWN)
    assert Attempt.objects.get(pk=world.review_attempt.pk).state == "passed"


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
    ("created_at", lambda w: PAST),
    ("summary", lambda w: '{"lines": 999}'),
]
EVIDENCE_SHOWN = {"provenance", "authoritative", "sha256", "size", "attempt", "name"}
EVIDENCE_SHOWN |= {"created_at", "summary"}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "value"),
    EVIDENCE_FIELDS,
    ids=[f"{f}-{n}" for n, (f, _) in enumerate(EVIDENCE_FIELDS)],
)
def test_an_upload_refuses_provenance_hash_size_owner_and_attempt(
    world, api, settings, name, value
):
    before = Stored.take(settings)

    response = post_upload(
        world.client(api, "agent"),
        world.attempt,
        multipart(
            [("kind", "log"), (name, value(world))], [("file", "run.log", CONTENT, "text/plain")]
        ),
    )

    refused(response, before, settings, name, why(name, EVIDENCE_SHOWN))


@pytest.mark.django_db
def test_a_text_field_named_file_does_not_choose_where_evidence_is_stored(world, api):
    forged = [("kind", "log"), ("file", "evidence/00/00/forged")]

    response = post_upload(
        world.client(api, "agent"),
        world.attempt,
        multipart(forged, [("file", "run.log", CONTENT, "text/plain")]),
    )

    assert response.status_code == 201, response.content[:300]
    evidence = Evidence.objects.get(pk=response.json()["id"])
    sha = hashlib.sha256(CONTENT).hexdigest()
    assert (evidence.sha256, evidence.file.name) == (sha, f"evidence/{sha[:2]}/{sha[2:4]}/{sha}")


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["agent", "verifier", "reviewer", "manager"])
@pytest.mark.parametrize("claimed", ["agent", "verifier", "gate", "human"])
def test_no_uploader_names_its_own_provenance(world, api, settings, role, claimed):
    before = Stored.take(settings)

    response = post_upload(
        world.client(api, role), world.attempt, upload_body("log", CONTENT, provenance=claimed)
    )

    refused(response, before, settings, "provenance", READ_ONLY)


@pytest.mark.django_db
def test_an_agent_who_is_also_a_verifier_cannot_certify_its_own_attempt(world, api, settings):
    Membership.objects.create(user=world.flow.agent, project=world.flow.project, role=Role.VERIFIER)
    before = Stored.take(settings)

    response = post_upload(
        world.client(api, "agent"),
        world.attempt,
        upload_body("log", CONTENT, provenance="verifier", authoritative="true"),
    )

    body = assert_refused(response, 400, "invalid")
    assert body["fields"] == {"authoritative": [READ_ONLY], "provenance": [READ_ONLY]}
    before.assert_unchanged(settings)
