"""The outbox: each event a subscription wants is written with the event, delivered
signed as Standard Webhooks, with one stable id, and retried until it lands."""

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from events import services
from events.models import Delivery, Subscription
from projects.errors import PermissionDenied
from projects.models import Event


@pytest.fixture
def subscribe(flow, receiver):
    def make(types=None, **kwargs):
        subscription = services.subscription_create(
            project=flow.project, actor=flow.manager, url=receiver.url, types=types, **kwargs
        )
        receiver.secret = subscription.secret
        return subscription

    return make


def test_a_delivery_is_written_with_its_event_and_received_signed(
    flow, subscribe, receiver, django_capture_on_commit_callbacks
):
    subscribe(types=["task.published"])

    with django_capture_on_commit_callbacks(execute=True):
        task = flow.ready(title="Publish me")

    delivery = Delivery.objects.get()
    event = Event.objects.get(transition="publish")
    assert (delivery.event, delivery.type, delivery.status) == (
        event,
        "task.published",
        "delivered",
    )
    assert receiver.refused == []
    [(webhook_id, payload)] = receiver.received
    assert webhook_id == f"msg_{event.pk}_{delivery.subscription_id}"
    assert payload["id"] == event.pk
    assert payload["type"] == "task.published"
    assert payload["actor"] == flow.manager.username
    assert payload["project"] == "FM"
    assert payload["data"]["key"] == task.key
    assert payload["data"]["url"].endswith(f"/tasks/{task.key}/")
    assert payload["data"]["api_url"].endswith(f"/api/v1/tasks/{task.key}/")


def test_an_event_that_rolls_back_owes_nothing(flow, subscribe):
    subscribe()
    task = flow.draft()

    with pytest.raises(RuntimeError), django_transaction_atomic():
        from tasks import services as task_services

        task_services.task_publish(task=task, actor=flow.manager)
        raise RuntimeError("the caller's transaction fails after the event")

    assert Delivery.objects.count() == 0
    assert not Event.objects.filter(transition="publish").exists()


def django_transaction_atomic():
    from django.db import transaction

    return transaction.atomic()


def test_types_not_wanted_are_not_written(flow, subscribe):
    subscribe(types=["decision.*"])

    flow.ready()

    assert Delivery.objects.count() == 0


def test_a_failed_try_is_retried_with_the_same_id_until_it_lands(
    flow, subscribe, receiver, django_capture_on_commit_callbacks
):
    subscribe(types=["task.published"])
    receiver.status = 500
    with django_capture_on_commit_callbacks(execute=True):
        flow.ready()
    delivery = Delivery.objects.get()
    assert (delivery.status, delivery.tries, delivery.last_code) == ("pending", 1, 500)
    assert delivery.next_try_at > timezone.now()

    receiver.status = 200
    Delivery.objects.filter(pk=delivery.pk).update(next_try_at=timezone.now())
    assert services.deliveries_due() == 1

    delivery.refresh_from_db()
    assert (delivery.status, delivery.tries, delivery.last_code) == ("delivered", 2, 200)
    ids = [h["webhook-id"] for _, h, _ in receiver.requests]
    assert ids == [delivery.webhook_id, delivery.webhook_id]


def test_a_redirect_is_a_failure_not_followed(
    flow, subscribe, receiver, django_capture_on_commit_callbacks
):
    subscribe(types=["task.published"])
    receiver.status, receiver.location = 302, "http://127.0.0.1:9/elsewhere"

    with django_capture_on_commit_callbacks(execute=True):
        flow.ready()

    delivery = Delivery.objects.get()
    assert (delivery.status, delivery.last_code) == ("pending", 302)
    assert "redirects are not followed" in delivery.last_error
    assert len(receiver.requests) == 1


def test_only_managers_subscribe(flow, receiver):
    with pytest.raises(PermissionDenied):
        services.subscription_create(project=flow.project, actor=flow.reviewer, url=receiver.url)
    assert Subscription.objects.count() == 0


def test_a_target_inside_the_network_is_refused_unless_allowed(flow, settings):
    settings.FACTORY_WEBHOOK_ALLOW_PRIVATE = False
    for url in ("http://127.0.0.1:8000/hook", "http://10.1.2.3/", "http://169.254.169.254/"):
        with pytest.raises(ValidationError) as refused:
            services.subscription_create(project=flow.project, actor=flow.manager, url=url)
        assert "inside the network" in refused.value.message_dict["url"][0]
    with pytest.raises(ValidationError) as refused:
        services.subscription_create(project=flow.project, actor=flow.manager, url="ftp://x.org/")
    assert refused.value.message_dict["url"] == ["must be an http:// or https:// URL"]
    assert Subscription.objects.count() == 0
