"""The webhooks API: managers subscribe, read the delivery log and redeliver; the secret
is answered once; bad input is refused by field and stores nothing."""

import pytest

from events import services
from events.models import Delivery, Subscription
from projects.models import Event

HOOKS = "/api/v1/projects/FM/webhooks/"


def test_a_new_subscription_answers_its_secret_once(flow, api):
    client = api(flow.manager)

    created = client.post(
        HOOKS, {"url": "http://127.0.0.1:9/hook", "types": ["task.*"]}, format="json"
    )

    assert created.status_code == 201
    body = created.json()
    assert body["secret"].startswith("whsec_")
    assert (body["url"], body["types"], body["format"], body["active"]) == (
        "http://127.0.0.1:9/hook",
        ["task.*"],
        "standard-webhooks",
        True,
    )
    again = client.get(f"{HOOKS}{body['id']}/").json()
    listed = client.get(HOOKS).json()["results"]
    assert "secret" not in again
    assert [("secret" in row) for row in listed] == [False]
    assert Event.objects.filter(transition="create", object_id=body["id"]).count() == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": "ftp://example.org/"}, "url"),
        ({"url": "http://127.0.0.1:9/", "types": ["task.eaten"]}, "types"),
        ({"url": "http://127.0.0.1:9/", "format": "xml"}, "format"),
        ({"url": "http://127.0.0.1:9/", "secret": "whsec_mine"}, "secret"),
        ({"url": 7}, "url"),
    ],
)
def test_bad_input_names_the_field_and_stores_nothing(flow, api, body, field):
    answer = api(flow.manager).post(HOOKS, body, format="json")

    assert answer.status_code == 400
    assert field in answer.json()["fields"]
    assert Subscription.objects.count() == 0


def test_a_target_inside_the_network_is_a_400_naming_the_url(flow, api, settings):
    settings.FACTORY_WEBHOOK_ALLOW_PRIVATE = False

    answer = api(flow.manager).post(HOOKS, {"url": "http://localhost:5432/"}, format="json")

    assert answer.status_code == 400
    assert "inside the network" in answer.json()["fields"]["url"][0]
    assert Subscription.objects.count() == 0


def test_malformed_json_is_refused_and_stores_nothing(flow, api):
    answer = api(flow.manager).post(HOOKS, "{not json", content_type="application/json")

    assert answer.status_code == 400
    assert Subscription.objects.count() == 0


def test_a_manager_turns_a_subscription_off_and_changes_its_types(flow, api):
    subscription = services.subscription_create(
        project=flow.project, actor=flow.manager, url="http://127.0.0.1:9/hook"
    )

    answer = api(flow.manager).patch(
        f"{HOOKS}{subscription.pk}/", {"active": False, "types": ["task.approved"]}, format="json"
    )

    assert answer.status_code == 200
    assert (answer.json()["active"], answer.json()["types"]) == (False, ["task.approved"])
    event = Event.objects.get(transition="edit", object_id=subscription.pk)
    assert (event.from_state, event.to_state, event.extra) == (
        "active",
        "inactive",
        {"fields": ["active", "types"]},
    )


def test_the_delivery_log_and_redeliver(flow, api):
    subscription = services.subscription_create(
        project=flow.project, actor=flow.manager, url="http://127.0.0.1:9/hook"
    )
    task = flow.ready()
    delivery = Delivery.objects.get()
    client = api(flow.manager)

    log = client.get(f"{HOOKS}{subscription.pk}/deliveries/").json()["results"]
    again = client.post(f"{HOOKS}{subscription.pk}/deliveries/{delivery.pk}/redeliver/")

    assert [(row["type"], row["status"], row["webhook_id"]) for row in log] == [
        ("task.published", "pending", delivery.webhook_id)
    ]
    assert log[0]["payload"]["data"]["key"] == task.key
    assert again.status_code == 202


def test_another_projects_webhooks_are_not_found_and_unchanged(flow, other_flow, api):
    theirs = services.subscription_create(
        project=other_flow.project, actor=other_flow.manager, url="http://127.0.0.1:9/hook"
    )
    client = api(flow.manager)

    answers = [
        client.get("/api/v1/projects/OT/webhooks/").status_code,
        client.patch(
            f"/api/v1/projects/FM/webhooks/{theirs.pk}/", {"active": False}, format="json"
        ).status_code,
        client.delete(f"/api/v1/projects/OT/webhooks/{theirs.pk}/").status_code,
    ]

    assert answers == [404, 404, 404]
    theirs.refresh_from_db()
    assert theirs.active is True


def test_a_redelivery_of_another_subscriptions_delivery_is_not_found(flow, api):
    mine = services.subscription_create(
        project=flow.project, actor=flow.manager, url="http://127.0.0.1:9/a"
    )
    services.subscription_create(
        project=flow.project, actor=flow.manager, url="http://127.0.0.1:9/b"
    )
    flow.ready()
    other = Delivery.objects.exclude(subscription=mine).get()

    answer = api(flow.manager).post(f"{HOOKS}{mine.pk}/deliveries/{other.pk}/redeliver/")

    assert answer.status_code == 404


def test_removing_a_subscription_keeps_its_history_in_the_audit_trail(flow, api):
    subscription = services.subscription_create(
        project=flow.project, actor=flow.manager, url="http://127.0.0.1:9/hook"
    )

    answer = api(flow.manager).delete(f"{HOOKS}{subscription.pk}/")

    assert answer.status_code == 204
    assert Subscription.objects.count() == 0
    assert list(
        Event.objects.filter(object_id=subscription.pk, content_type__model="subscription")
        .order_by("pk")
        .values_list("transition", flat=True)
    ) == ["create", "delete"]


def test_a_new_url_without_its_token_answers_that_the_token_was_cleared(flow, api):
    subscription = services.subscription_create(
        project=flow.project,
        actor=flow.manager,
        url="http://127.0.0.1:9/statuses/{sha}",
        format="commit-status",
        token="ghp_secret",
    )

    answer = api(flow.manager).patch(
        f"{HOOKS}{subscription.pk}/", {"url": "http://127.0.0.1:9/elsewhere/{sha}"}, format="json"
    )

    assert answer.status_code == 200
    assert (answer.json()["token_cleared"], answer.json()["has_token"]) == (True, False)
    subscription.refresh_from_db()
    assert (subscription.url, subscription.token) == ("http://127.0.0.1:9/elsewhere/{sha}", "")
