"""The webhook pages: a manager subscribes (the secret is shown once), reads the delivery
log, redelivers, turns a webhook off and removes it; nobody else sees them."""

from events import services
from events.models import Delivery, Subscription


def test_a_manager_subscribes_and_sees_the_secret_once(flow, client):
    client.force_login(flow.manager)

    page = client.post(
        "/projects/FM/webhooks/",
        {
            "url": "http://127.0.0.1:9/hook",
            "types": ["task.approved"],
            "format": "standard-webhooks",
        },
    )

    subscription = Subscription.objects.get()
    assert page.status_code == 200
    assert subscription.secret in page.content.decode()
    assert page["Cache-Control"] == "no-store"
    assert subscription.types == ["task.approved"]
    assert subscription.secret not in client.get("/projects/FM/webhooks/").content.decode()


def test_a_refused_url_is_shown_on_the_form_and_nothing_is_stored(flow, client, settings):
    settings.FACTORY_WEBHOOK_ALLOW_PRIVATE = False
    client.force_login(flow.manager)

    page = client.post(
        "/projects/FM/webhooks/", {"url": "http://10.0.0.8/", "format": "standard-webhooks"}
    )

    assert page.status_code == 200
    assert "inside the network" in page.content.decode()
    assert Subscription.objects.count() == 0


def test_only_managers_see_the_webhook_pages(flow, client):
    subscription = services.subscription_create(
        project=flow.project, actor=flow.manager, url="http://127.0.0.1:9/hook"
    )
    client.force_login(flow.reviewer)

    assert client.get("/projects/FM/webhooks/").status_code == 404
    assert client.get(f"/projects/FM/webhooks/{subscription.pk}/").status_code == 404
    assert (
        client.post(f"/projects/FM/webhooks/{subscription.pk}/", {"action": "delete"}).status_code
        == 404
    )
    assert Subscription.objects.count() == 1


def test_the_delivery_log_shows_each_try_and_redelivers(flow, client):
    subscription = services.subscription_create(
        project=flow.project, actor=flow.manager, url="http://127.0.0.1:9/hook"
    )
    task = flow.ready()
    delivery = Delivery.objects.get()
    Delivery.objects.filter(pk=delivery.pk).update(status="failed", last_code=500, tries=10)
    client.force_login(flow.manager)

    page = client.get(f"/projects/FM/webhooks/{subscription.pk}/").content.decode()
    again = client.post(
        f"/projects/FM/webhooks/{subscription.pk}/",
        {"action": "redeliver", "delivery": delivery.pk},
    )

    assert "task.published" in page and delivery.webhook_id in page and task.key in page
    assert again.status_code == 302
    delivery.refresh_from_db()
    assert delivery.status == "pending"


def test_a_manager_turns_a_webhook_off_and_removes_it(flow, client):
    subscription = services.subscription_create(
        project=flow.project, actor=flow.manager, url="http://127.0.0.1:9/hook"
    )
    client.force_login(flow.manager)

    client.post(
        f"/projects/FM/webhooks/{subscription.pk}/",
        {"action": "edit", "url": subscription.url, "format": "standard-webhooks", "context": "ci"},
    )
    subscription.refresh_from_db()
    assert (subscription.active, subscription.context) == (False, "ci")

    client.post(f"/projects/FM/webhooks/{subscription.pk}/", {"action": "delete"})
    assert Subscription.objects.count() == 0


def test_the_index_lists_the_projects_a_manager_manages(flow, other_flow, client):
    client.force_login(flow.manager)

    page = client.get("/webhooks/").content.decode()

    assert "/projects/FM/webhooks/" in page
    assert "/projects/OT/webhooks/" not in page


def test_a_new_url_on_the_page_clears_the_token_and_says_so(flow, client):
    subscription = services.subscription_create(
        project=flow.project,
        actor=flow.manager,
        url="http://127.0.0.1:9/statuses/{sha}",
        format="commit-status",
        token="ghp_secret",
    )
    client.force_login(flow.manager)

    page = client.post(
        f"/projects/FM/webhooks/{subscription.pk}/",
        {"action": "edit", "url": "http://127.0.0.1:9/other/{sha}", "format": "commit-status"},
        follow=True,
    )

    subscription.refresh_from_db()
    assert (subscription.url, subscription.token) == ("http://127.0.0.1:9/other/{sha}", "")
    assert "The URL changed, so its token was cleared" in page.content.decode()
