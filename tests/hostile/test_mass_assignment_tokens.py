"""Tokens that must no longer work: an expired token, a revoked token and the token of a
deactivated user get 401 on every operation of the schema, and change nothing; a live token
of the same caller gets through.
"""

from datetime import timedelta

import pytest
from django.utils import timezone
from knox.models import AuthToken
from rest_framework.test import APIClient

from tests.hostile.world import assert_refused
from tests.hostile.writes import OPERATIONS, Stored, caller_for, request

# A field a caller may not write is refused by the serializer before anything is stored, and
# a dead token before any query but its own; the writes themselves run on PostgreSQL in their
# modules' tests (ADR 0015, "engine_neutral").
pytestmark = pytest.mark.engine_neutral


# --- Tokens that must no longer work -----------------------------------------------------------


def dead_token(world, user, how: str) -> str:
    row, token = AuthToken.objects.create(user=user)
    if how == "expired":
        AuthToken.objects.filter(pk=row.pk).update(expiry=timezone.now() - timedelta(seconds=1))
    elif how == "revoked":
        AuthToken.objects.filter(pk=row.pk).delete()
    elif how == "user-deactivated":
        type(user).objects.filter(pk=user.pk).update(is_active=False)
    return token


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
