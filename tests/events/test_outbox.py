"""The outbox: each event a subscription wants is written with the event, delivered
signed as Standard Webhooks, with one stable id, and retried until it lands."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from events import services
from events.models import Delivery, Subscription
from events.types import type_of
from projects.errors import Conflict, PermissionDenied
from projects.models import Event
from tasks import attempts, review
from tasks import services as task_services
from tasks.landing import task_land, task_landing_return


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

    with pytest.raises(RuntimeError), transaction.atomic():
        task_services.task_publish(task=task, actor=flow.manager)
        raise RuntimeError("the caller's transaction fails after the event")

    assert Delivery.objects.count() == 0
    assert not Event.objects.filter(transition="publish").exists()


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


def payloads(subscription):
    return {d.type: d.payload for d in subscription.deliveries.order_by("pk")}


def test_a_rejection_tells_the_verdict_the_reason_and_the_commit(flow, subscribe):
    subscription = subscribe(types=["task.*", "attempt.*"])
    task, _ = flow.in_review()

    review.task_reject(task=task, actor=flow.reviewer, reason="the test is skipped")

    sent = payloads(subscription)
    assert list(sent) == [
        "task.published",
        "task.claimed",
        "attempt.submitted",
        "task.in_review",
        "task.rejected",
    ]
    data = sent["task.rejected"]["data"]
    assert (data["verdict"], data["reason"], data["reviewer"]) == (
        "reject",
        "the test is skipped",
        flow.reviewer.username,
    )
    assert (data["key"], data["to_state"], data["change"]) == (
        task.key,
        "ready",
        {"commit": "abc1230000000000000000000000000000000000"},
    )
    assert data["attempt"]["number"] == 1


def test_failed_gates_are_named_with_their_summaries(flow, subscribe):
    subscription = subscribe(types=["attempt.gates_failed", "task.failed"])

    flow.failed()

    sent = payloads(subscription)
    assert list(sent) == ["attempt.gates_failed", "task.failed"]
    assert sent["attempt.gates_failed"]["data"]["reason"] == "tests-pass: 1 failed"
    assert sent["task.failed"]["data"]["to_state"] == "failed"


def test_decisions_and_spec_versions_have_types_of_their_own(flow, subscribe):
    subscription = subscribe(types=["spec.*", "decision.*"])

    spec = flow.spec()

    sent = payloads(subscription)
    assert list(sent) == ["spec.version_accepted"]
    assert sent["spec.version_accepted"]["data"]["key"] == spec.key
    assert sent["spec.version_accepted"]["data"]["version"] == 1


def test_a_commit_status_subscription_posts_the_code_hosts_shape(
    flow, receiver, django_capture_on_commit_callbacks
):
    services.subscription_create(
        project=flow.project,
        actor=flow.manager,
        url=receiver.url + "/statuses/{sha}",
        format="commit-status",
        token="ghp_secret",
    )

    with django_capture_on_commit_callbacks(execute=True):
        task, _ = flow.in_review()
        review.task_approve(task=task, actor=flow.reviewer)

    assert [path for path, _, _ in receiver.requests] == [
        "/hook/statuses/abc1230000000000000000000000000000000000"
    ] * 3
    assert {h["authorization"] for _, h, _ in receiver.requests} == {"Bearer ghp_secret"}
    assert receiver.json_bodies() == [
        {
            "state": "pending",
            "target_url": f"http://127.0.0.1:8000/tasks/{task.key}/",
            "description": "the gates are running",
            "context": "factory-memory",
        },
        {
            "state": "pending",
            "target_url": f"http://127.0.0.1:8000/tasks/{task.key}/",
            "description": "the gates passed; waiting for review",
            "context": "factory-memory",
        },
        {
            "state": "success",
            "target_url": f"http://127.0.0.1:8000/tasks/{task.key}/",
            "description": f"approved by {flow.reviewer.username}",
            "context": "factory-memory",
        },
    ]


def test_a_commit_status_url_without_sha_gets_the_commit_appended(
    flow, receiver, django_capture_on_commit_callbacks
):
    services.subscription_create(
        project=flow.project,
        actor=flow.manager,
        url=receiver.url + "/statuses/",
        format="commit-status",
        types=["attempt.submitted"],
    )

    with django_capture_on_commit_callbacks(execute=True):
        flow.checking()

    assert [path for path, _, _ in receiver.requests] == [
        "/hook/statuses/abc1230000000000000000000000000000000000"
    ]


def test_unknown_event_types_are_refused_by_name(flow, receiver):
    with pytest.raises(ValidationError) as refused:
        services.subscription_create(
            project=flow.project, actor=flow.manager, url=receiver.url, types=["task.eaten"]
        )

    assert refused.value.message_dict["types"] == ["unknown event types: task.eaten"]


def test_a_delivery_that_never_lands_is_failed_when_the_schedule_is_spent(
    flow, subscribe, receiver, settings, django_capture_on_commit_callbacks
):
    settings.FACTORY_WEBHOOK_RETRY_SCHEDULE = [0.0, 0.0]
    subscribe(types=["task.published"])
    receiver.status = 503

    with django_capture_on_commit_callbacks(execute=True):
        flow.ready()
    for _ in range(3):
        services.deliveries_due()

    delivery = Delivery.objects.get()
    assert (delivery.status, delivery.tries, delivery.next_try_at) == ("failed", 3, None)
    assert services.deliveries_due() == 0


def test_a_subscription_failing_for_a_day_is_turned_off_and_says_why(
    flow, subscribe, receiver, django_capture_on_commit_callbacks
):
    subscription = subscribe(types=["task.published"])
    Subscription.objects.filter(pk=subscription.pk).update(
        failing_since=timezone.now() - timedelta(hours=25)
    )
    receiver.status = 500

    with django_capture_on_commit_callbacks(execute=True):
        flow.ready()

    subscription.refresh_from_db()
    assert subscription.active is False
    assert "no delivery succeeded for 25.0 h" in subscription.disabled_reason
    assert "answered 500" in subscription.disabled_reason
    assert Event.objects.filter(transition="disable", object_id=subscription.pk).count() == 1
    assert services.deliveries_due() == 0  # nothing is tried while it is off


def test_turning_a_subscription_back_on_sends_what_waited(
    flow, subscribe, receiver, django_capture_on_commit_callbacks
):
    subscription = subscribe(types=["task.published"])
    services.subscription_update(subscription=subscription, actor=flow.manager, active=False)
    flow.ready()
    assert Delivery.objects.get().status == "pending"

    with django_capture_on_commit_callbacks(execute=True):
        services.subscription_update(subscription=subscription, actor=flow.manager, active=True)

    assert Delivery.objects.get().status == "delivered"
    assert receiver.types() == ["task.published"]


def test_redeliver_sends_a_delivered_event_again_with_the_same_id(
    flow, subscribe, receiver, django_capture_on_commit_callbacks
):
    subscribe(types=["task.published"])
    with django_capture_on_commit_callbacks(execute=True):
        flow.ready()
    delivery = Delivery.objects.get()

    with django_capture_on_commit_callbacks(execute=True):
        services.delivery_redeliver(delivery=delivery, actor=flow.manager)

    assert [i for i, _ in receiver.received] == [delivery.webhook_id] * 2


def test_a_target_that_moved_inside_the_network_is_not_posted_to(
    flow, subscribe, receiver, settings, django_capture_on_commit_callbacks
):
    subscribe(types=["task.published"])
    settings.FACTORY_WEBHOOK_ALLOW_PRIVATE = False

    with django_capture_on_commit_callbacks(execute=True):
        flow.ready()

    delivery = Delivery.objects.get()
    assert delivery.status == "pending"
    assert delivery.last_error.startswith("refused: 127.0.0.1 resolves to 127.0.0.1")
    assert receiver.requests == []


PASSING = (
    b"<testsuite tests='1'><testcase classname='tests.test_claim' name='test_claim'/></testsuite>"
)


def test_a_gates_verdict_is_an_event_and_the_runners_has_a_type_of_its_own(
    flow, subscribe, django_capture_on_commit_callbacks
):
    subscription = subscribe(types=["gate.finished", "runner.finished"])
    flow.gates({"tests-pass": {}})
    _, attempt = flow.claimed()
    flow.attach(attempt, PASSING, kind="junit", name="junit.xml")

    with django_capture_on_commit_callbacks(execute=True):
        attempts.attempt_submit(
            attempt=attempt,
            actor=flow.agent,
            summary="done",
            change={"commit": "abc1230000000000000000000000000000000000"},
        )

    [payload] = payloads(subscription).values()
    assert (payload["type"], payload["data"]["gate"], payload["data"]["state"]) == (
        "gate.finished",
        "tests-pass",
        "passed",
    )
    assert payload["data"]["summary"] == "1 tests passed"
    assert type_of("evidence.gaterun", "fail", "failed", gate="runner") == "runner.finished"
    assert type_of("evidence.gaterun", "start", "running", gate="runner") is None


def test_a_withdrawal_that_fails_the_task_is_task_failed_and_the_others_task_withdrawn(
    flow, subscribe
):
    subscription = subscribe(types=["task.*", "attempt.*"])
    task, attempt = flow.in_review(max_attempts=1)
    for _ in range(attempts.WITHDRAWALS_FREE):
        attempts.attempt_withdraw(attempt=attempt, reason="closed")
        attempt = attempts.task_claim(agent=flow.agent)
    before = set(payloads(subscription))

    attempts.attempt_withdraw(attempt=attempt, reason="pull request #3 closed")

    assert "task.failed" not in before and "task.withdrawn" in before
    payload = payloads(subscription)["task.failed"]
    assert (payload["data"]["key"], payload["data"]["state"]) == (task.key, "failed")


def test_a_project_has_at_most_the_webhooks_its_limit_allows(flow, receiver, settings):
    settings.FACTORY_WEBHOOK_MAX_PER_PROJECT = 2
    for _ in range(2):
        services.subscription_create(project=flow.project, actor=flow.manager, url=receiver.url)

    with pytest.raises(Conflict) as refused:
        services.subscription_create(project=flow.project, actor=flow.manager, url=receiver.url)

    assert refused.value.code == "too_many_webhooks"
    assert Subscription.objects.count() == 2


def test_old_finished_deliveries_are_pruned_and_pending_ones_kept(flow, subscribe):
    subscribe()
    flow.ready()
    flow.ready()
    old = timezone.now() - timedelta(days=31)
    first, second = Delivery.objects.order_by("pk")
    Delivery.objects.filter(pk=first.pk).update(status="delivered", created_at=old)
    Delivery.objects.filter(pk=second.pk).update(created_at=old)

    assert services.deliveries_prune() == 1
    assert list(Delivery.objects.values_list("pk", flat=True)) == [second.pk]


def test_every_way_a_task_returns_to_ready_has_a_type(flow, subscribe):
    subscription = subscribe(
        types=["task.released", "task.unblocked", "task.reopened", "task.withdrawn"]
    )
    failed, _ = flow.failed()
    blocked, _ = flow.blocked()
    _, attempt = flow.claimed()
    _, in_review = flow.in_review()

    attempts.attempt_release(attempt=attempt, actor=flow.agent, reason="later")
    task_services.task_unblock(task=blocked, actor=flow.manager)
    task_services.task_reopen(task=failed, actor=flow.manager)
    attempts.attempt_withdraw(attempt=in_review, reason="pull request #1 closed on GitHub")

    assert [
        (d.type, d.payload["data"]["to_state"]) for d in subscription.deliveries.order_by("pk")
    ] == [
        ("task.released", "ready"),
        ("task.unblocked", "ready"),
        ("task.reopened", "ready"),
        ("task.withdrawn", "ready"),
    ]
    withdrawn = subscription.deliveries.get(type="task.withdrawn").payload["data"]
    assert (withdrawn["reason"], withdrawn["attempt"]["number"]) == (
        "pull request #1 closed on GitHub",
        in_review.number,
    )


def commit_statuses(flow, url, token="ghp_secret"):
    return services.subscription_create(
        project=flow.project,
        actor=flow.manager,
        url=url + "/statuses/{sha}",
        format="commit-status",
        types=["attempt.submitted"],
        token=token,
    )


def test_a_new_url_clears_the_token_so_nothing_carries_it_there(
    flow, receiver, django_capture_on_commit_callbacks
):
    subscription = commit_statuses(flow, "http://127.0.0.1:9/old")

    saved = services.subscription_update(
        subscription=subscription, actor=flow.manager, url=receiver.url + "/statuses/{sha}"
    )
    with django_capture_on_commit_callbacks(execute=True):
        flow.checking()

    assert (saved.token_cleared, saved.token) == (True, "")
    subscription.refresh_from_db()
    assert subscription.token == ""
    [(path, headers, _)] = receiver.requests
    assert (path, "authorization" in headers) == (
        "/hook/statuses/abc1230000000000000000000000000000000000",
        False,
    )
    event = Event.objects.filter(transition="edit").get()
    assert event.extra == {"fields": ["url"], "token_cleared": True}


@pytest.mark.parametrize(
    ("changes", "token", "cleared"),
    [
        ({"url": "http://127.0.0.1:9/new/{sha}", "token": "ghp_secret"}, "ghp_secret", False),
        ({"url": "http://127.0.0.1:9/new/{sha}", "token": "ghp_other"}, "ghp_other", False),
        ({"url": "http://127.0.0.1:9/old/statuses/{sha}"}, "ghp_secret", False),
        ({"context": "ci", "format": "commit-status"}, "ghp_secret", False),
    ],
)
def test_a_token_is_kept_when_the_url_stays_or_the_same_call_gives_it(
    flow, changes, token, cleared
):
    subscription = commit_statuses(flow, "http://127.0.0.1:9/old")

    saved = services.subscription_update(subscription=subscription, actor=flow.manager, **changes)

    subscription.refresh_from_db()
    assert (saved.token_cleared, subscription.token) == (cleared, token)


def _queued_with_landing(flow):
    flow.project.repository_url = "https://git.example.org/fm.git"
    flow.project.verify = {"test": "true", "junit": "junit.xml"}
    flow.project.landing = {"mode": "push", "method": "squash", "batch_max": 4, "target_branch": ""}
    flow.project.save()
    task, attempt = flow.in_review()
    review.task_approve(task=task, actor=flow.reviewer)
    attempt.refresh_from_db()
    return task, attempt


def test_a_landed_task_posts_success_on_the_commit_the_queue_put_on_the_target(
    flow, receiver, django_capture_on_commit_callbacks
):
    services.subscription_create(
        project=flow.project,
        actor=flow.manager,
        url=receiver.url + "/statuses/{sha}",
        format="commit-status",
        types=["task.landed"],
    )
    landed = "d" * 40

    with django_capture_on_commit_callbacks(execute=True):
        task, attempt = _queued_with_landing(flow)
        task_land(attempt=attempt, commit=landed, batch=None, seconds=3.0)

    assert [path for path, _, _ in receiver.requests] == [f"/hook/statuses/{landed}"]
    assert receiver.json_bodies() == [
        {
            "state": "success",
            "target_url": f"http://127.0.0.1:8000/tasks/{task.key}/",
            "description": "landed by the merge queue: verified at this tree",
            "context": "factory-memory",
        }
    ]


def test_landing_events_tell_a_webhook_where_the_change_went(
    flow, subscribe, django_capture_on_commit_callbacks
):
    subscription = subscribe(types=["task.landed", "landing.failed"])

    with django_capture_on_commit_callbacks(execute=True):
        _, attempt = _queued_with_landing(flow)
        task_landing_return(
            attempt=attempt,
            state="conflict",
            reason="landing failed: conflict in calc.py",
            details={"paths": ["calc.py"], "hunks": [{"path": "calc.py", "text": "<<<"}]},
        )

    sent = payloads(subscription)
    assert list(sent) == ["landing.failed"]
    assert sent["landing.failed"]["data"]["state"] == "ready"
    assert sent["landing.failed"]["data"]["landing"] == {
        "state": "conflict",
        "reason": "landing failed: conflict in calc.py",
        "paths": ["calc.py"],
    }


def test_budget_exhausted_is_delivered_for_the_task_and_the_project(
    flow, subscribe, receiver, django_capture_on_commit_callbacks
):
    flow.project.budget_usd = 1
    flow.project.save(update_fields=["budget_usd"])
    _, attempt = flow.claimed(budget_usd="1.00")
    subscribe(types=["budget.exhausted"])

    with django_capture_on_commit_callbacks(execute=True), pytest.raises(Conflict) as refused:
        attempts.attempt_heartbeat(attempt=attempt, actor=flow.agent, usage={"cost_usd": "1.2"})

    assert refused.value.code == "budget_exhausted"
    payloads = sorted((p["data"]["scope"], p) for _, p in receiver.received)
    assert [(scope, p["type"], p["actor"]) for scope, p in payloads] == [
        ("project", "budget.exhausted", None),
        ("task", "budget.exhausted", None),
    ]
    project, task = payloads[0][1]["data"], payloads[1][1]["data"]
    assert (project["key"], project["spent_usd"], project["budget_usd"]) == ("FM", "1.20", "1.00")
    assert (task["key"], task["spent_usd"], task["budget_usd"]) == (
        attempt.task.key,
        "1.20",
        "1.00",
    )
    assert task["attempt"]["state"] == "abandoned"
    assert task["usage"]["cost_usd"] == "1.20"


def test_a_void_of_an_attempts_usage_is_delivered_with_what_was_voided(flow, subscribe):
    subscription = subscribe(types=["usage.voided"])
    _, attempt = flow.claimed()
    attempts.attempt_heartbeat(attempt=attempt, actor=flow.agent, usage={"cost_usd": "42"})

    attempts.attempt_usage_void(attempt=attempt, actor=flow.manager, reason="meter slipped")

    sent = payloads(subscription)
    assert list(sent) == ["usage.voided"]
    payload = sent["usage.voided"]
    assert (payload["actor"], payload["data"]["key"]) == ("fm-manager", attempt.task.key)
    voided = payload["data"]["voided"]
    assert (voided["by"], voided["reason"], voided["usage"]["cost_usd"]) == (
        "fm-manager",
        "meter slipped",
        "42.00",
    )
    assert payload["data"]["month"] == attempt.started_at.strftime("%Y-%m")
    assert (payload["data"]["from_state"], payload["data"]["to_state"]) == ("counted", "voided")
