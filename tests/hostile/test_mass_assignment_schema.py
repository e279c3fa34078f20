"""A walk over the schema: every write (POST, PUT, PATCH) refuses an unknown field and a
field its answer shows that only the server sets (400 ``invalid`` naming it), and nothing
stored changes; every operation of the schema is walked.
"""

import pytest
from knox.models import AuthToken
from rest_framework.test import APIClient

from tests.hostile.writes import (
    OPERATIONS,
    READ_ONLY,
    UNKNOWN,
    Stored,
    caller_for,
    refused,
    request,
)

# A field a caller may not write is refused by the serializer before anything is stored, and
# a dead token before any query but its own; the writes themselves run on PostgreSQL in their
# modules' tests (ADR 0015, "engine_neutral").
pytestmark = pytest.mark.engine_neutral


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
