"""Strings that JSON carries but a text column cannot hold, sent where the API stores
opaque JSON: each is stored exactly (it reads back the same) or refused with a 400."""

import json

import pytest

from tests.hostile.world import NUL, Snapshot, assert_refused, send_json, valid

# Strings that JSON carries but a text column cannot hold (PostgreSQL refuses NUL in text and
# jsonb; a lone surrogate cannot be encoded as UTF-8). Where the API stores opaque JSON, the
# right answer is either to store the value exactly (it reads back the same) or a 400.


def _checkpoint(world, client):
    return client.get(f"/api/v1/attempts/{world.attempt.pk}/checkpoint/").json()["data"]


def _new_spec_select(world, client):
    version = client.get("/api/v1/specs/FM-S2/versions/1/").json()
    return version["criteria"][0]["proof"]["select"]


def _new_version_select(world, client):
    version = client.get(f"/api/v1/specs/{world.spec.key}/versions/3/").json()
    return version["criteria"][0]["proof"]["select"]


def _amendment_select(world, client):
    decision = client.get("/api/v1/decisions/FM-D2/").json()
    return decision["amendments"][0]["criteria"][0]["proof"]["select"]


def selecting(select: str) -> list:
    return [{"key": "AC-1", "text": "t", "proof": {"check": "tests", "select": select}}]


OPAQUE_CASES = [
    pytest.param(
        "checkpoint",
        {"data": {"k": NUL}, "revision": 0},
        _checkpoint,
        {"k": NUL},
        id="checkpoint-value-nul",
    ),
    pytest.param(
        "checkpoint",
        {"data": {NUL: 1}, "revision": 0},
        _checkpoint,
        {NUL: 1},
        id="checkpoint-key-nul",
    ),
    pytest.param(
        "checkpoint",
        b'{"data": {"k": "\\ud800"}, "revision": 0}',
        _checkpoint,
        {"k": "\ud800"},
        id="checkpoint-lone-surrogate",
    ),
    pytest.param(
        "spec.create",
        valid("spec.create", criteria=selecting(f"tests/{NUL}::*")),
        _new_spec_select,
        f"tests/{NUL}::*",
        id="spec-select-nul",
    ),
    pytest.param(
        "spec.create",
        json.dumps(valid("spec.create", criteria=selecting("tests/X::*")))
        .replace("tests/X::*", "tests/\\ud800::*")
        .encode(),
        _new_spec_select,
        "tests/\ud800::*",
        id="spec-select-lone-surrogate",
    ),
    pytest.param(
        "version.create",
        {"body": "b", "criteria": selecting(f"tests/{NUL}::*")},
        _new_version_select,
        f"tests/{NUL}::*",
        id="version-select-nul",
    ),
    pytest.param(
        "decision.create",
        valid(
            "decision.create",
            amendments=[{"spec": "FM-S1", "body": "b", "criteria": selecting(NUL)}],
        ),
        _amendment_select,
        NUL,
        id="amendment-select-nul",
    ),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "body", "read_back", "expected"), OPAQUE_CASES)
def test_a_string_no_text_column_holds_is_stored_exactly_or_refused(
    world, api, settings, name, body, read_back, expected
):
    before = Snapshot.take(settings)

    response = send_json(world, api, name, body)

    if response.status_code == 400:
        assert_refused(response, 400, "invalid")
        before.assert_unchanged(settings)
    else:
        assert 200 <= response.status_code < 300, response.content[:500]
        assert read_back(world, world.client(api, "manager")) == expected
