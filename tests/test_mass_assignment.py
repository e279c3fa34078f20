"""Requests that try to set what only the server decides, and tokens that must no longer work.

A caller never sets state, keys, numbers, counters, leases, provenance, hashes or owners.
Every write (POST, PUT, PATCH) refuses a body naming a field it does not write: 400
``invalid`` whose ``fields`` name it ("read-only field" when the resource shows it, else
"unknown field"), and nothing stored changes. The rows below send one such field with a
plausible hostile value; a walk over the schema sends an unknown and a read-only field to
every write. Then: an expired token, a revoked token and the token of a deactivated user get
401 on every operation of the schema.
"""

import hashlib
import json
import shutil
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from django.apps import apps
from django.conf import settings
from django.utils import timezone
from knox.models import AuthToken
from rest_framework.test import APIClient

from decisions.models import Decision
from evidence.models import Evidence
from projects.models import Membership, Project
from projects.roles import Role
from tasks.models import Attempt, Task
from tests.conftest import module_media, world_for_the_module
from tests.factories import CRITERIA
from tests.test_hostile_inputs import (
    BEADS_LINE,
    MULTIPART,
    World,
    assert_refused,
    files_in,
    multipart,
    post_upload,
    schema_operations,
    upload_body,
)

# A field a caller may not write is refused by the serializer before anything is stored, and
# a dead token before any query but its own; the writes themselves run on PostgreSQL in their
# modules' tests (ADR 0015, "engine_neutral").
pytestmark = pytest.mark.engine_neutral

PAST = "2000-01-01T00:00:00Z"
FUTURE = "2999-01-01T00:00:00Z"
READ_ONLY = "read-only field"
UNKNOWN = "unknown field"


@pytest.fixture(scope="module")
def _world_media(tmp_path_factory):
    """Where the module's world keeps its evidence files while it is built."""
    with module_media(tmp_path_factory):
        yield Path(settings.MEDIA_ROOT)


@pytest.fixture
def _isolated_media(settings, tmp_path, _world_media):
    """Each test's own media folder, holding the world's evidence files as it found them."""
    settings.MEDIA_ROOT = tmp_path / "media"
    shutil.copytree(_world_media, settings.MEDIA_ROOT)


@pytest.fixture(scope="module")
def _world(django_db_setup, django_db_blocker, _world_media):
    with world_for_the_module(django_db_blocker, World) as world:
        yield world


@pytest.fixture
def world(db, _world):
    """test_hostile_inputs' World, built once for the module; each test is rolled back to it."""
    return _world


def call(world, api, role, method, path, body):
    client = world.client(api, role)
    return getattr(client, method)(path, body, format="json")


STORED_APPS = ("projects", "tasks", "landing", "decisions", "evidence", "events", "interop")


@dataclass
class Stored:
    """Every row of every app (projects, memberships and webhooks too) and every stored file."""

    rows: dict
    media: set

    @classmethod
    def take(cls, settings) -> "Stored":
        rows = {
            model._meta.label: list(model._base_manager.order_by("pk").values())
            for label in STORED_APPS
            for model in apps.get_app_config(label).get_models(include_auto_created=True)
        }
        return cls(rows, files_in(settings.MEDIA_ROOT))

    def assert_unchanged(self, settings) -> None:
        now = Stored.take(settings)
        assert files_in(settings.FACTORY_UPLOAD_TEMP_DIR) == set(), "a temporary file lingers"
        assert now.media == self.media, "a file was stored"
        for label, rows in self.rows.items():
            assert now.rows[label] == rows, f"{label} changed"


def refused(response, before, settings, name: str, why: str) -> None:
    """A 400 ``invalid`` naming exactly ``name`` with ``why``, and nothing stored changed."""
    body = assert_refused(response, 400, "invalid")
    assert body["fields"] == {name: [why]}, body
    before.assert_unchanged(settings)


def why(name: str, shown: set) -> str:
    return READ_ONLY if name in shown else UNKNOWN


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


def attempt_call(world, api, role, method, action, body):
    return call(world, api, role, method, f"/api/v1/attempts/{world.attempt.pk}/{action}/", body)


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
DECISION_SHOWN = {"state", "decided_by", "decided_at", "verdict_reason", "proposed_by"}
DECISION_SHOWN |= {"proposed_in", "key", "superseded_by", "created_at", "project"}


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "value"), DECISION_FIELDS, ids=[f for f, _ in DECISION_FIELDS])
def test_a_proposal_refuses_who_decided_it_and_how(world, api, settings, name, value):
    before = Stored.take(settings)

    response = call(
        world,
        api,
        "reviewer",
        "post",
        "/api/v1/decisions/",
        {"project": "FM", "title": "t", "context": "c", "decision": "d", name: value(world)},
    )

    refused(response, before, settings, name, why(name, DECISION_SHOWN))
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
def test_a_proposal_in_an_attempt_refuses_another_owner_or_place(world, api, settings, extra):
    extra = {k: world.review_attempt.pk if v == "REVIEW_ATTEMPT" else v for k, v in extra.items()}
    before = Stored.take(settings)

    response = attempt_call(
        world,
        api,
        "agent",
        "post",
        "decisions",
        {"title": "t", "context": "c", "decision": "d", **extra},
    )

    refused(response, before, settings, next(iter(extra)), READ_ONLY)


VERSION_FIELDS = [
    ("state", lambda w: "accepted", READ_ONLY),
    ("number", lambda w: 99, READ_ONLY),
    ("author", lambda w: w.flow.agent.pk, READ_ONLY),
    ("source_decision", lambda w: w.decision.key, READ_ONLY),
    ("accepted_at", lambda w: PAST, READ_ONLY),
    ("spec", lambda w: "OT-S1", READ_ONLY),
    ("author_id", lambda w: w.flow.agent.pk, UNKNOWN),
]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "value", "reason"), VERSION_FIELDS, ids=[f[0] for f in VERSION_FIELDS]
)
def test_a_new_spec_version_refuses_its_number_state_and_author(
    world, api, settings, name, value, reason
):
    before = Stored.take(settings)

    response = call(
        world,
        api,
        "manager",
        "post",
        f"/api/v1/specs/{world.spec.key}/versions/",
        {"body": "v3", "criteria": CRITERIA, name: value(world)},
    )

    refused(response, before, settings, name, reason)


SPEC_FIELDS = [
    ("key", lambda w: "FM-S99", READ_ONLY),
    ("number", lambda w: 99, UNKNOWN),
    ("state", lambda w: "accepted", UNKNOWN),
    ("created_by", lambda w: w.flow.agent.pk, UNKNOWN),
    ("current_version", lambda w: 1, READ_ONLY),
    ("versions", lambda w: [{"number": 1, "state": "accepted"}], READ_ONLY),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "value", "reason"), SPEC_FIELDS, ids=[f[0] for f in SPEC_FIELDS])
def test_a_new_spec_refuses_its_key_and_versions(world, api, settings, name, value, reason):
    before = Stored.take(settings)

    response = call(
        world,
        api,
        "manager",
        "post",
        "/api/v1/specs/",
        {"project": "FM", "title": "t", "body": "b", "criteria": CRITERIA, name: value(world)},
    )

    refused(response, before, settings, name, reason)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "criterion",
    [{"check": "tests"}, {"id": 1}, {"state": "met"}],
    ids=lambda extra: next(iter(extra)),
)
def test_a_criterion_with_a_field_it_does_not_have_is_refused(world, api, settings, criterion):
    before = Stored.take(settings)
    name = next(iter(criterion))

    response = call(
        world,
        api,
        "manager",
        "post",
        f"/api/v1/specs/{world.spec.key}/versions/",
        {"body": "v3", "criteria": [{**CRITERIA[0], **criterion}]},
    )

    body = assert_refused(response, 400, "invalid")
    assert body["fields"] == {"criteria": [f"0: {name}: {UNKNOWN}"]}
    before.assert_unchanged(settings)


NESTED_DECISION_FIELDS = [
    ("alternatives", {"option": "o", "chosen": True}, "chosen"),
    ("amendments", {"spec": "FM-S1", "body": "b", "criteria": CRITERIA, "number": 9}, "number"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("field", "item", "name"), NESTED_DECISION_FIELDS, ids=[f for f, _, _ in NESTED_DECISION_FIELDS]
)
def test_a_nested_object_of_a_proposal_refuses_a_field_it_does_not_have(
    world, api, settings, field, item, name
):
    before = Stored.take(settings)

    response = call(
        world,
        api,
        "manager",
        "post",
        "/api/v1/decisions/",
        {"project": "FM", "title": "t", "context": "c", "decision": "d", field: [item]},
    )

    body = assert_refused(response, 400, "invalid")
    assert body["fields"] == {field: [f"0: {name}: {UNKNOWN}"]}
    before.assert_unchanged(settings)


PROJECT_FIELDS = [
    ("slug", lambda w: "XX", READ_ONLY),
    ("my_roles", lambda w: ["agent", "verifier", "reviewer", "manager"], READ_ONLY),
    ("monthly_quota_usd", lambda w: 1000, UNKNOWN),
    ("task_seq", lambda w: 0, UNKNOWN),
    ("spec_seq", lambda w: 0, UNKNOWN),
    ("decision_seq", lambda w: 0, UNKNOWN),
    ("created_at", lambda w: PAST, UNKNOWN),
    ("members", lambda w: [w.other.agent.pk], UNKNOWN),
    ("id", lambda w: w.other.project.pk, UNKNOWN),
]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "value", "reason"), PROJECT_FIELDS, ids=[f[0] for f in PROJECT_FIELDS]
)
def test_a_project_patch_refuses_its_slug_counters_and_unknown_settings(
    world, api, settings, name, value, reason
):
    before = Stored.take(settings)

    response = call(
        world,
        api,
        "manager",
        "patch",
        "/api/v1/projects/FM/",
        {"name": "Renamed", name: value(world)},
    )

    refused(response, before, settings, name, reason)
    assert Project.objects.get(slug="FM").name != "Renamed"


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
    ("POST", "/api/v1/projects/{slug}/landing/{key}/dequeue/"): {"to": "ready", "reason": "r"},
    ("POST", "/api/v1/projects/{slug}/landing/{key}/fast/"): {"reason": "the outage fix"},
    ("POST", "/api/v1/projects/{slug}/landing/pause/"): {"reason": "a release freeze"},
    ("POST", "/api/v1/projects/{slug}/landing/flaky/"): {
        "test": "tests/test_calc.py::CalcTest::test_add",
        "quarantined": True,
        "reason": "flaky",
    },
    ("POST", "/api/v1/attempts/{attempt_id}/usage/void/"): {"reason": "r"},
    ("POST", "/api/v1/tasks/{key}/revert/"): {"reason": "r"},
    ("POST", "/api/v1/tasks/{key}/revert/cancel/"): {"reason": "r"},
    ("POST", "/api/v1/projects/{slug}/code-host/accounts/"): {"login": "fm-x", "user": "fm-agent"},
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
    path = path.replace("{key}", world.queued.key)  # the landing queue's task
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
        .replace("{host_id}", str(world.host_account.host_id))
    )


def caller_for(world, method: str, template: str):
    """Who would be allowed to make the call with a live token."""
    if "/comments/" in template and method == "POST":
        return world.flow.reviewer
    if template.endswith("/usage/void/"):
        return world.flow.manager
    if template == "/api/v1/tasks/claim/" or (
        "{attempt_id}" in template and method != "GET" and not template.endswith("/evidence/")
    ):
        return world.flow.agent
    if template.endswith("/review/"):
        return world.flow.reviewer
    return world.flow.manager


def request(world, client, method: str, template: str, extra: dict | None = None):
    """The operation called with a body it accepts, plus the fields of ``extra``."""
    extra = extra or {}
    path = fill(world, method, template)
    if method == "POST" and template.endswith("/evidence/"):
        return post_upload(client, world.attempt, upload_body(**extra))
    if method == "POST" and template.endswith("/imports/"):
        return client.generic(
            "POST",
            path,
            data=multipart(
                [("format", "beads"), *extra.items()],
                [("file", "i.jsonl", BEADS_LINE, "text/plain")],
            ),
            content_type=MULTIPART,
        )
    body = {**BODIES.get((method, template), {}), **extra}
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
    yield world
    del world.evidence  # the world outlives the test; its evidence row does not


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
    before = Stored.take(settings)

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
    check (unblock, reopen, revert and its cancel then meet a task in the wrong state, a
    landing retry a lander that is not backing off, and a resume a landing that is not
    paused: 409)."""
    world = world_with_evidence
    client = APIClient()
    client.raise_request_exception = False
    _, token = AuthToken.objects.create(user=caller_for(world, method, template))
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")

    response = request(world, client, method, template)

    wrong_state = (
        "/unblock/",
        "/reopen/",
        "/revert/",
        "/revert/cancel/",
        "/code-host/accounts/",  # the world's project has no code host to ask
        "/landing/retry/",
        "/landing/resume/",
    )
    expected = 409 if template.endswith(wrong_state) else None
    assert response.status_code == expected or 200 <= response.status_code < 300, response.content[
        :300
    ]


# --- Every write refuses a field it does not write ----------------------------------------------

WRITES = [(m, p) for m, p in OPERATIONS if m in ("POST", "PUT", "PATCH")]

# For each write: a field its answer shows that the body may not set, and why it is refused
# (read-only where the body is the resource itself, unknown where the call is a command).
SHOWN_FIELD = {
    ("PUT", "/api/v1/attempts/{attempt_id}/checkpoint/"): ("saved_at", READ_ONLY),
    ("POST", "/api/v1/attempts/{attempt_id}/comments/"): ("author", READ_ONLY),
    ("POST", "/api/v1/attempts/{attempt_id}/comments/{comment_id}/resolve/"): (
        "resolved",
        UNKNOWN,
    ),
    ("POST", "/api/v1/attempts/{attempt_id}/decisions/"): ("state", READ_ONLY),
    ("POST", "/api/v1/attempts/{attempt_id}/evidence/"): ("provenance", READ_ONLY),
    ("POST", "/api/v1/attempts/{attempt_id}/heartbeat/"): ("lease_expires_at", UNKNOWN),
    ("POST", "/api/v1/attempts/{attempt_id}/release/"): ("state", UNKNOWN),
    ("POST", "/api/v1/attempts/{attempt_id}/submit/"): ("state", UNKNOWN),
    ("POST", "/api/v1/attempts/{attempt_id}/usage/void/"): ("usage", UNKNOWN),
    ("POST", "/api/v1/decisions/"): ("state", READ_ONLY),
    ("POST", "/api/v1/decisions/{key}/accept/"): ("state", UNKNOWN),
    ("POST", "/api/v1/decisions/{key}/reject/"): ("state", UNKNOWN),
    ("PATCH", "/api/v1/projects/{slug}/"): ("slug", READ_ONLY),
    ("POST", "/api/v1/projects/{slug}/imports/"): ("state", READ_ONLY),
    ("POST", "/api/v1/projects/{slug}/imports/{run_id}/apply/"): ("state", UNKNOWN),
    ("POST", "/api/v1/projects/{slug}/webhooks/"): ("secret", READ_ONLY),
    ("PATCH", "/api/v1/projects/{slug}/webhooks/{id}/"): ("secret", READ_ONLY),
    ("POST", "/api/v1/projects/{slug}/webhooks/{id}/deliveries/{delivery}/redeliver/"): (
        "status",
        UNKNOWN,
    ),
    ("POST", "/api/v1/specs/"): ("key", READ_ONLY),
    ("POST", "/api/v1/specs/{key}/versions/"): ("state", READ_ONLY),
    ("POST", "/api/v1/specs/{key}/versions/{number}/accept/"): ("state", UNKNOWN),
    ("POST", "/api/v1/tasks/"): ("state", READ_ONLY),
    ("PATCH", "/api/v1/tasks/{key}/"): ("state", READ_ONLY),
    ("POST", "/api/v1/tasks/{key}/cancel/"): ("state", UNKNOWN),
    ("POST", "/api/v1/tasks/{key}/publish/"): ("state", UNKNOWN),
    ("POST", "/api/v1/tasks/{key}/reopen/"): ("state", UNKNOWN),
    ("POST", "/api/v1/tasks/{key}/revert/"): ("landed_commit", UNKNOWN),
    ("POST", "/api/v1/tasks/{key}/revert/cancel/"): ("landed_commit", UNKNOWN),
    ("POST", "/api/v1/projects/{slug}/code-host/accounts/"): ("host_id", UNKNOWN),
    ("POST", "/api/v1/tasks/{key}/review/"): ("state", UNKNOWN),
    ("POST", "/api/v1/tasks/{key}/unblock/"): ("state", UNKNOWN),
    ("POST", "/api/v1/tasks/claim/"): ("attempt", UNKNOWN),
    ("POST", "/api/v1/projects/{slug}/landing/{key}/dequeue/"): ("state", UNKNOWN),
    ("POST", "/api/v1/projects/{slug}/landing/{key}/fast/"): ("queued", UNKNOWN),
    ("POST", "/api/v1/projects/{slug}/landing/retry/"): ("state", UNKNOWN),
    ("POST", "/api/v1/projects/{slug}/landing/pause/"): ("paused", UNKNOWN),
    ("POST", "/api/v1/projects/{slug}/landing/resume/"): ("paused", UNKNOWN),
    ("POST", "/api/v1/projects/{slug}/landing/flaky/"): ("flakes", UNKNOWN),
}


def live_client(world, method: str, template: str) -> APIClient:
    client = APIClient()
    client.raise_request_exception = False
    _, token = AuthToken.objects.create(user=caller_for(world, method, template))
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def test_every_write_of_the_schema_has_a_shown_field_to_try():
    assert set(WRITES) == set(SHOWN_FIELD)
    assert len(WRITES) == 38


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "template"), WRITES, ids=[f"{m} {p}" for m, p in WRITES])
def test_every_write_refuses_an_unknown_field_and_changes_nothing(
    world_with_evidence, settings, method, template
):
    world = world_with_evidence
    client = live_client(world, method, template)
    before = Stored.take(settings)

    response = request(world, client, method, template, {"no_such_field": "1"})

    refused(response, before, settings, "no_such_field", UNKNOWN)


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "template"), WRITES, ids=[f"{m} {p}" for m, p in WRITES])
def test_every_write_refuses_a_field_only_the_server_sets(
    world_with_evidence, settings, method, template
):
    world = world_with_evidence
    name, reason = SHOWN_FIELD[(method, template)]
    client = live_client(world, method, template)
    before = Stored.take(settings)

    response = request(world, client, method, template, {name: "1"})

    refused(response, before, settings, name, reason)


def test_every_operation_of_the_schema_is_walked():
    """69 operations today (tests/authz_matrix.tsv has one row each); a new one joins by itself."""
    assert len(OPERATIONS) == 69
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
