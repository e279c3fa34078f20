"""Rate limits, page sizes and body sizes of the API."""

import pytest
from django.core.cache import cache
from rest_framework.settings import api_settings
from rest_framework.test import APIClient
from rest_framework.throttling import SimpleRateThrottle, UserRateThrottle

from projects.models import Event
from projects.throttles import client_address
from tasks.models import Attempt, Task


@pytest.fixture
def tight_rate(settings, monkeypatch):
    cache.clear()
    monkeypatch.setattr(
        UserRateThrottle, "THROTTLE_RATES", {**api_settings.DEFAULT_THROTTLE_RATES, "user": "3/min"}
    )
    yield
    cache.clear()


@pytest.mark.django_db
def test_a_caller_over_the_rate_gets_429_with_a_retry_hint(flow, api, tight_rate):
    client = api(flow.reviewer)
    statuses = [client.get("/api/v1/tasks/").status_code for _ in range(4)]

    response = client.get("/api/v1/tasks/")

    assert statuses == [200, 200, 200, 429]
    assert (response.status_code, response.json()["code"]) == (429, "throttled")
    assert int(response["Retry-After"]) > 0
    assert response.json()["retry_after"] >= int(response["Retry-After"])


@pytest.mark.django_db
def test_a_throttled_claim_changes_nothing(flow, api, tight_rate):
    flow.ready()
    client = api(flow.agent)
    for _ in range(3):
        client.get("/api/v1/tasks/")

    response = client.post("/api/v1/tasks/claim/", {}, format="json")

    assert response.status_code == 429
    assert (Attempt.objects.count(), Task.objects.get().state) == (0, "ready")


@pytest.mark.django_db
def test_a_claim_while_the_rate_limit_store_is_down_is_503_and_changes_nothing(flow, api, settings):
    flow.ready()
    client = api(flow.agent)
    events = Event.objects.count()
    nothing_listens = "redis://127.0.0.1:1/0"  # port 1: connection refused at once
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": nothing_listens,
        }
    }

    response = client.post("/api/v1/tasks/claim/", {}, format="json")

    assert (response.status_code, response["Retry-After"]) == (503, "5")
    assert response.json() == {
        "detail": "the rate-limit store is unavailable; retry shortly",
        "code": "unavailable",
    }
    assert (Attempt.objects.count(), Task.objects.get().state) == (0, "ready")
    assert Event.objects.count() == events


@pytest.mark.django_db
def test_pages_hold_at_most_200_items(flow, api):
    for n in range(3):
        flow.draft(title=f"t{n}")

    body = api(flow.manager).get("/api/v1/tasks/", {"page_size": 100000}).json()
    small = api(flow.manager).get("/api/v1/tasks/", {"page_size": 2}).json()

    assert len(body["results"]) == 3
    assert (len(small["results"]), small["next"] is not None) == (2, True)
    from projects.rest import IdCursorPagination

    assert IdCursorPagination.max_page_size == 200


@pytest.mark.django_db
def test_a_json_body_over_the_limit_is_413_and_changes_nothing(flow, api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    _, attempt = flow.claimed()
    big = {"data": {"blob": "x" * 20_000}, "revision": 0}

    response = api(flow.agent).put(f"/api/v1/attempts/{attempt.pk}/checkpoint/", big, format="json")

    assert (response.status_code, response.json()["code"]) == (413, "too_large")
    assert Attempt.objects.get(pk=attempt.pk).checkpoint is None


# --- Refused authentication (ADR 0006) -------------------------------------------------------

BAD = {"HTTP_AUTHORIZATION": "Bearer fm_" + "0" * 64}


@pytest.fixture
def three_failures(settings, monkeypatch):
    cache.clear()
    rates = {**api_settings.DEFAULT_THROTTLE_RATES, "auth_failure": "3/min", "anon": "3/min"}
    monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", rates)
    yield
    cache.clear()


@pytest.mark.django_db
def test_bad_tokens_past_the_limit_get_429_with_a_retry_hint(flow, three_failures):
    client = APIClient()
    statuses = [client.get("/api/v1/tasks/", **BAD).status_code for _ in range(3)]

    response = client.get("/api/v1/tasks/", **BAD)

    assert statuses == [401, 401, 401]
    assert (response.status_code, response.json()["code"]) == (429, "throttled")
    assert int(response["Retry-After"]) > 0
    assert response.json()["retry_after"] >= int(response["Retry-After"])


@pytest.mark.django_db
def test_calls_without_a_token_past_the_anonymous_rate_get_429(flow, three_failures):
    client = APIClient()
    statuses = [client.get("/api/v1/tasks/").status_code for _ in range(4)]

    assert statuses == [401, 401, 401, 429]


@pytest.mark.django_db
def test_a_forged_forwarded_for_does_not_escape_the_count(flow, three_failures):
    client = APIClient()
    statuses = [
        client.get("/api/v1/tasks/", HTTP_X_FORWARDED_FOR=f"203.0.113.{n}", **BAD).status_code
        for n in range(4)
    ]

    assert statuses == [401, 401, 401, 429]


@pytest.mark.django_db
def test_behind_one_trusted_proxy_each_forwarded_address_has_its_own_count(
    flow, three_failures, settings
):
    settings.FACTORY_TRUSTED_PROXIES = 1
    client = APIClient()
    for _ in range(3):
        client.get("/api/v1/tasks/", HTTP_X_FORWARDED_FOR="forged, 203.0.113.7", **BAD)

    same = client.get("/api/v1/tasks/", HTTP_X_FORWARDED_FOR="203.0.113.7", **BAD)
    other = client.get("/api/v1/tasks/", HTTP_X_FORWARDED_FOR="203.0.113.8", **BAD)

    assert (same.status_code, other.status_code) == (429, 401)


@pytest.mark.django_db
def test_a_good_token_still_works_from_an_address_over_the_limit(flow, api, three_failures):
    client = api(flow.reviewer)
    for _ in range(4):
        APIClient().get("/api/v1/tasks/", **BAD)

    response = client.get("/api/v1/tasks/")

    assert response.status_code == 200


@pytest.mark.parametrize(
    ("forwarded", "proxies", "address"),
    [
        ("203.0.113.7", 0, "127.0.0.1"),
        ("forged, 203.0.113.7", 1, "203.0.113.7"),
        ("forged, 203.0.113.7, 10.0.0.2", 2, "203.0.113.7"),
        ("203.0.113.7", 2, "127.0.0.1"),  # fewer entries than proxies: not believed
        ("not-an-address", 1, "127.0.0.1"),
        ("", 1, "127.0.0.1"),
    ],
)
def test_the_client_address_believes_only_the_trusted_proxies(
    rf, settings, forwarded, proxies, address
):
    settings.FACTORY_TRUSTED_PROXIES = proxies
    request = rf.get("/", HTTP_X_FORWARDED_FOR=forwarded)

    assert client_address(request) == address
