"""Webhooks in the admin: saves go through the services, deliveries are read-only."""

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from events import services
from events.models import Delivery, Subscription
from projects.models import Event


@pytest.fixture
def admin_client(client, flow):
    root = get_user_model().objects.create_superuser("root", "root@example.invalid", "pw")
    client.force_login(root)
    return client


def test_a_subscription_added_in_the_admin_is_made_by_the_service(flow, admin_client):
    answer = admin_client.post(
        reverse("admin:events_subscription_add"),
        {
            "project": flow.project.pk,
            "url": "http://127.0.0.1:9/hook",
            "format": "standard-webhooks",
            "types": "[]",
            "context": "factory-memory",
            "active": "on",
        },
        follow=True,
    )

    subscription = Subscription.objects.get()
    assert subscription.secret.startswith("whsec_")
    assert any(subscription.secret in str(m) for m in answer.context["messages"])
    assert Event.objects.filter(transition="create", object_id=subscription.pk).count() == 1


def test_a_refused_url_in_the_admin_is_a_form_error_and_stores_nothing(
    flow, admin_client, settings
):
    settings.FACTORY_WEBHOOK_ALLOW_PRIVATE = False

    answer = admin_client.post(
        reverse("admin:events_subscription_add"),
        {
            "project": flow.project.pk,
            "url": "http://192.168.1.1/",
            "format": "standard-webhooks",
            "types": "[]",
            "context": "factory-memory",
        },
    )

    assert answer.status_code == 200
    assert "inside the network" in answer.content.decode()
    assert Subscription.objects.count() == 0


def test_deliveries_are_read_only_in_the_admin(flow, admin_client):
    services.subscription_create(
        project=flow.project, actor=flow.manager, url="http://127.0.0.1:9/"
    )
    flow.ready()
    delivery = Delivery.objects.get()

    page = admin_client.get(reverse("admin:events_delivery_change", args=[delivery.pk]))
    refused = admin_client.post(
        reverse("admin:events_delivery_delete", args=[delivery.pk]), {"post": "yes"}
    )

    assert page.status_code == 200
    assert refused.status_code == 403
    assert Delivery.objects.count() == 1


def test_a_new_url_in_the_admin_clears_the_token_and_says_so(flow, admin_client):
    subscription = services.subscription_create(
        project=flow.project,
        actor=flow.manager,
        url="http://127.0.0.1:9/statuses/{sha}",
        format="commit-status",
        token="ghp_secret",
    )

    answer = admin_client.post(
        reverse("admin:events_subscription_change", args=[subscription.pk]),
        {
            "url": "http://127.0.0.1:9/other/{sha}",
            "format": "commit-status",
            "types": "[]",
            "token": "ghp_secret",  # the form's initial value: not given again
            "context": "factory-memory",
            "active": "on",
        },
        follow=True,
    )

    subscription.refresh_from_db()
    assert (subscription.url, subscription.token) == ("http://127.0.0.1:9/other/{sha}", "")
    assert "The URL changed, so its token was cleared." in map(str, answer.context["messages"])
