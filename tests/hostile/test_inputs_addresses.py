"""Hostile addresses: a NUL in a key of an API path or a page's address, and a hostile
``next`` where a verdict form sends the reader."""

from urllib.parse import quote

import pytest

from tests.hostile.world import JSON, Snapshot, assert_refused, schema_operations

# Keys in the path: a NUL cannot match any key, so the answer is a 404 (PostgreSQL refuses
# to even compare a NUL in a text column, so the lookup must not reach the database with it).


KEYED_OPERATIONS = [
    (method, path) for method, path in schema_operations() if "{key}" in path or "{slug}" in path
]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("method", "template"), KEYED_OPERATIONS, ids=[f"{m} {p}" for m, p in KEYED_OPERATIONS]
)
def test_a_nul_in_a_key_of_the_path_is_not_found(world, api, settings, method, template):
    path = (
        template.replace("{key}", quote("FM-1\x00"))
        .replace("{slug}", quote("FM\x00"))
        .replace("{number}", "1")
    )
    before = Snapshot.take(settings)

    response = world.client(api, "manager").generic(method, path, b"{}", JSON)

    assert_refused(response, 404, "not_found")
    before.assert_unchanged(settings)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/tasks/FM-1%00/"),
        ("GET", "/tasks/FM-1%00/gates/"),
        ("GET", "/decisions/FM-D1%00/"),
        ("GET", "/specs/FM-S1%00/"),
        ("POST", "/tasks/FM-1%00/review/"),
        ("POST", "/tasks/FM-1%00/publish/"),
        ("POST", "/decisions/FM-D1%00/reject/"),
    ],
)
def test_a_nul_in_a_key_of_a_page_address_is_not_found(world, client, settings, method, path):
    client.force_login(world.flow.manager)
    client.raise_request_exception = False
    before = Snapshot.take(settings)

    response = client.generic(
        method, path, "verdict=reject&reason=r", "application/x-www-form-urlencoded"
    )

    assert response.status_code == 404
    before.assert_unchanged(settings)


# --- Where a verdict form sends the reader ------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "target",
    [
        "javascript:alert(1)",
        " javascript:alert(1)",
        "//evil.example/x",
        "https://evil.example/",
        "/\\evil.example/",
    ],
)
def test_a_verdict_form_never_redirects_to_a_hostile_next(world, client, target):
    client.force_login(world.flow.manager)

    response = client.post(
        f"/decisions/{world.decision.key}/reject/", {"reason": "no", "next": target}
    )

    assert (response.status_code, response["Location"]) == (
        302,
        f"/decisions/{world.decision.key}/",
    )
