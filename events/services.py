"""Every write of the events app: subscriptions, the outbox, and delivery tries.

- ``subscription_create`` / ``_update`` / ``_delete``: managers only, each an audit Event.
- ``outbox_write``: called inside the transaction that records an audit Event (the
  kernel's ``event_recorded``); writes the deliveries the event owes and starts them
  once it commits.
- ``delivery_try``: one signed POST of one delivery, outside any transaction; its
  outcome and the next try are written after.
- ``delivery_redeliver`` and ``deliveries_due`` (the sweep that finds tries that are due,
  or whose worker died, whatever became of their broker messages).
"""

import json
import logging
import random
import unicodedata
from datetime import timedelta

import httpx
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from events import commit_status, signing, targets
from events.models import Delivery, DeliveryStatus, Format, Subscription
from events.payloads import envelope
from events.types import matches, type_of, unknown
from projects import metrics
from projects.addresses import AddressRefused
from projects.errors import Conflict
from projects.models import Event, Project
from projects.queue import enqueue, enqueue_on_commit
from projects.roles import Role
from projects.services import check_storable, require_role

log = logging.getLogger(__name__)

DELIVER_JOB = "events.jobs.deliver_job"
EDITABLE = {"url", "description", "types", "format", "token", "context", "active"}


# --- Subscriptions -------------------------------------------------------------------


def _clean(changes: dict, *, format_: str) -> dict:
    errors = {}
    if "url" in changes:
        url = (changes["url"] or "").strip()
        why = targets.refusal(url)
        if why:
            errors["url"] = why
        changes["url"] = url
    if "types" in changes:
        types = changes["types"] or []
        if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
            errors["types"] = "a list of event types"
        else:
            if strangers := unknown(types):
                errors["types"] = f"unknown event types: {', '.join(strangers)}"
            changes["types"] = list(dict.fromkeys(types))
    if "format" in changes and changes["format"] not in Format.values:
        errors["format"] = f"choose one of {', '.join(Format.values)}"
    for name in ("description", "token", "context"):
        if name in changes:
            changes[name] = (changes[name] or "").strip()
            check_storable(changes[name], name)
    if errors:
        raise ValidationError(errors)
    return changes


def subscription_create(
    *,
    project: Project,
    actor,
    url: str,
    types: list[str] | None = None,
    format: str = Format.STANDARD,
    description: str = "",
    token: str = "",
    context: str = "factory-memory",
) -> Subscription:
    """A new active subscription with a fresh secret. Managers of the project only; at
    most ``FACTORY_WEBHOOK_MAX_PER_PROJECT`` per project."""
    require_role(actor, project.pk, Role.MANAGER)
    limit = settings.FACTORY_WEBHOOK_MAX_PER_PROJECT
    if Subscription.objects.filter(project=project).count() >= limit:
        raise Conflict(
            f"{project.slug} has {limit} webhooks, the most a project may have;"
            " remove one or point several event types at one receiver",
            code="too_many_webhooks",
        )
    fields = _clean(
        {
            "url": url,
            "types": types or [],
            "format": format,
            "description": description,
            "token": token,
            "context": context or "factory-memory",
        },
        format_=format,
    )
    with transaction.atomic():
        subscription = Subscription.objects.create(
            project=project, created_by=actor, secret=signing.new_secret(), **fields
        )
        Event.record(
            subscription,
            actor=actor,
            transition="create",
            from_state="",
            to_state="active",
            extra={"url": subscription.url, "types": subscription.types},
        )
    return subscription


def subscription_update(*, subscription: Subscription, actor, **changes) -> Subscription:
    """Change a subscription's target, types, format, token or whether it is active.

    A new URL clears the stored token unless the same call gives one (empty included):
    a code host's token never follows the subscription to a receiver it was not given
    for. The returned subscription's ``token_cleared`` says whether that happened.
    Turning a subscription back on clears why it was off and makes its pending
    deliveries due at once.
    """
    unknown = set(changes) - EDITABLE
    if unknown:
        raise ValidationError({name: "this field cannot be changed" for name in sorted(unknown)})
    require_role(actor, subscription.project_id, Role.MANAGER)
    format_ = changes.get("format", subscription.format)
    if "format" in changes and "url" not in changes:
        changes["url"] = subscription.url  # a new format checks the URL again
    changes = _clean(changes, format_=format_)
    if "active" in changes and not isinstance(changes["active"], bool):
        raise ValidationError({"active": "true or false"})
    with transaction.atomic():
        subscription = Subscription.objects.select_for_update(no_key=True, of=("self",)).get(
            pk=subscription.pk
        )
        given = set(changes)
        changes = {k: v for k, v in changes.items() if getattr(subscription, k) != v}
        subscription.token_cleared = bool(
            "url" in changes and "token" not in given and subscription.token
        )
        if subscription.token_cleared:
            changes["token"] = ""
        if not changes:
            return subscription
        was_active = subscription.active
        for name, value in changes.items():
            setattr(subscription, name, value)
        fields = [*changes, "updated_at"]
        if subscription.active and not was_active:
            subscription.disabled_reason = ""
            subscription.failing_since = None
            fields += ["disabled_reason", "failing_since"]
            due = subscription.deliveries.filter(status=DeliveryStatus.PENDING)
            due.update(next_try_at=timezone.now() + _requeue(), locked_until=None)
            for pk in due.values_list("pk", flat=True):
                enqueue_on_commit(DELIVER_JOB, pk)
        subscription.save(update_fields=fields)
        Event.record(
            subscription,
            actor=actor,
            transition="edit",
            from_state="active" if was_active else "inactive",
            to_state="active" if subscription.active else "inactive",
            extra={
                "fields": sorted(k for k in changes if k != "token"),
                **({"token_cleared": True} if subscription.token_cleared else {}),
            },
        )
    return subscription


def subscription_delete(*, subscription: Subscription, actor) -> None:
    """Remove a subscription and its delivery log; the audit trail keeps that it existed."""
    require_role(actor, subscription.project_id, Role.MANAGER)
    with transaction.atomic():
        Event.record(
            subscription,
            actor=actor,
            transition="delete",
            from_state="active" if subscription.active else "inactive",
            to_state="",
            extra={"url": subscription.url},
        )
        subscription.delete()


# --- The outbox ----------------------------------------------------------------------


def outbox_write(*, event: Event, subject) -> list[Delivery]:
    """Write the deliveries ``event`` owes, in the caller's transaction, and start them
    when it commits. Also wakes the live stream (PostgreSQL NOTIFY is transactional too).

    One query for an event with a type (the NOTIFY and the subscriptions together),
    none for one without; and the deliveries' insert when a subscription wants it.
    """
    label = subject._meta.label_lower
    type_name = type_of(label, event.transition, event.to_state, getattr(subject, "gate", ""))
    if type_name is None:
        return []
    wanted = [s for s in _subscriptions(event) if matches(s.types, type_name)]
    if not wanted:
        return []
    payload = envelope(event, subject, type_name, project_slug=wanted[0].project.slug)
    now = timezone.now()
    deliveries = [
        # The first try is sent on commit; the sweep sends it only if that message is lost.
        Delivery(
            subscription=s,
            event=event,
            type=type_name,
            payload=payload,
            next_try_at=now + _requeue(),
        )
        for s in wanted
        if s.format != Format.COMMIT_STATUS or commit_status.wanted(type_name, payload)
    ]
    Delivery.objects.bulk_create(deliveries)
    for delivery in deliveries:
        enqueue_on_commit(DELIVER_JOB, delivery.pk)
    return deliveries


STREAM_CHANNEL = "factory_events"

# The outer side (the NOTIFY) is always evaluated, so it runs even with no subscriptions.
_NOTIFY_AND_SUBSCRIPTIONS = f"""
SELECT s.id, s.types, s.format, p.slug
FROM (SELECT pg_notify(%s, %s)) AS n
LEFT JOIN {Subscription._meta.db_table} s ON s.project_id = %s
LEFT JOIN {Project._meta.db_table} p ON p.id = s.project_id
"""


def _subscriptions(event: Event) -> list[Subscription]:
    """The project's subscriptions, those turned off included (their deliveries wait
    until they are turned on again); on PostgreSQL, wake the live stream too (its
    NOTIFY is delivered when the transaction commits, never if it rolls back)."""
    if connection.vendor != "postgresql":
        return list(
            Subscription.objects.filter(project_id=event.project_id)
            .select_related("project")
            .only("id", "types", "format", "project__slug")
        )
    with connection.cursor() as cursor:
        cursor.execute(_NOTIFY_AND_SUBSCRIPTIONS, [STREAM_CHANNEL, str(event.pk), event.project_id])
        rows = cursor.fetchall()
    found = []
    for pk, types, format_, slug in rows:
        if pk is None:
            continue
        subscription = Subscription(
            pk=pk,
            project_id=event.project_id,
            types=json.loads(types) if isinstance(types, str) else types,
            format=format_,
        )
        subscription.project = Project(pk=event.project_id, slug=slug)
        found.append(subscription)
    return found


# --- Tries ---------------------------------------------------------------------------


def _claim(delivery_id: int) -> Delivery | None:
    """Take the try's lease, or None when the delivery is not pending, not due, or
    another worker holds it. A dead worker's lease expires and the sweep tries again."""
    now = timezone.now()
    with transaction.atomic():
        delivery = (
            # ``of=self``: a writer holding the project or subscription row (numbering a
            # task, inserting an event) must not make this try skip.
            Delivery.objects.select_for_update(no_key=True, skip_locked=True, of=("self",))
            .select_related("subscription__project")
            .filter(pk=delivery_id, status=DeliveryStatus.PENDING)
            .first()
        )
        if delivery is None or not delivery.subscription.active:
            return None
        if delivery.locked_until and delivery.locked_until > now:
            return None
        delivery.tries += 1
        delivery.last_try_at = now
        delivery.locked_until = now + timedelta(seconds=settings.FACTORY_WEBHOOK_TIMEOUT + 30)
        delivery.save(update_fields=["tries", "last_try_at", "locked_until"])
    return delivery


def _request(delivery: Delivery) -> tuple[str, dict, bytes]:
    subscription = delivery.subscription
    if subscription.format == Format.COMMIT_STATUS:
        body = json.dumps(commit_status.body(delivery.payload, subscription.context)).encode()
        url = commit_status.url(subscription.url, delivery.payload)
        headers = {"Authorization": f"Bearer {subscription.token}"} if subscription.token else {}
    else:
        body = json.dumps(delivery.payload, separators=(",", ":")).encode()
        url = subscription.url
        headers = {}
    headers.update(signing.headers(subscription.secret, delivery.webhook_id, body))
    headers.update(
        {
            "content-type": "application/json",
            "user-agent": "factory-memory-webhooks",
            "accept-encoding": "identity",  # a failed answer's excerpt is read as sent
        }
    )
    return url, headers, body


EXCERPT_CHARS = 200  # of a failed answer's body: what a manager needs, not what it sent
_EXCERPT_BYTES = 1024


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """``text`` on one line, without control or format characters, at most ``limit`` long."""
    shown = "".join(" " if unicodedata.category(c)[0] in "CZ" else c for c in text)
    return " ".join(shown.split())[:limit]


def _answer(response: httpx.Response) -> str:
    """The start of a failed answer's body: at most ``_EXCERPT_BYTES`` are read of it,
    however much the receiver sends, and what was read is kept if it stalls."""
    read = b""
    try:
        for chunk in response.iter_raw():
            read += chunk
            if len(read) >= _EXCERPT_BYTES:
                break
    except httpx.HTTPError:
        pass
    return excerpt(read[:_EXCERPT_BYTES].decode("utf-8", "replace"))


def _post(delivery: Delivery) -> tuple[int | None, str]:
    """POST once: ``(status code or None, error)``. Redirects are answers, not followed.

    The target is checked, and connected to at the addresses that check answered
    (``events.targets.client``); the whole try ends within ``FACTORY_WEBHOOK_TIMEOUT``.
    Of a failed answer only its code and a short excerpt are kept, never its headers.
    """
    url, headers, body = _request(delivery)
    try:
        target = targets.checked(url)
    except AddressRefused as exc:
        return None, f"refused: {exc}"
    seconds = settings.FACTORY_WEBHOOK_TIMEOUT
    try:
        with (
            targets.client(target, seconds=seconds) as http,
            http.stream("POST", url, content=body, headers=headers) as response,
        ):
            code = response.status_code
            if 200 <= code < 300:
                return code, ""
            if 300 <= code < 400:
                where = excerpt(response.headers.get("location", ""))
                return code, f"redirected to {where}; redirects are not followed"
            return code, _answer(response)
    except httpx.TimeoutException:
        return None, f"no answer within {seconds:g} s"
    except httpx.HTTPError as exc:
        return None, excerpt(f"{type(exc).__name__}: {exc}", 500)


def retry_delay(tries: int) -> float | None:
    """Seconds before the next try after ``tries`` failed ones, with ±20 % jitter so that
    a receiver coming back is not hit by every delivery at once; None when spent."""
    schedule = settings.FACTORY_WEBHOOK_RETRY_SCHEDULE
    if tries > len(schedule):
        return None
    return schedule[tries - 1] * random.uniform(0.8, 1.2)


def delivery_try(*, delivery_id: int) -> Delivery | None:
    """Try one delivery once, if it is pending, due and nobody else is trying it.

    The POST runs outside any transaction; its outcome is written after. A failure
    schedules the next try by ``FACTORY_WEBHOOK_RETRY_SCHEDULE`` (about a day in all),
    then marks the delivery failed; a subscription with no success for
    ``FACTORY_WEBHOOK_DISABLE_AFTER`` seconds is turned off, with the reason.
    """
    delivery = _claim(delivery_id)
    if delivery is None:
        return None
    code, error = _post(delivery)
    now = timezone.now()
    ok = code is not None and 200 <= code < 300
    with transaction.atomic():
        # The subscription's row alone (no ordering join to the project), and in the mode
        # that does not block deliveries being inserted for it meanwhile.
        subscription = (
            Subscription.objects.select_for_update(no_key=True, of=("self",))
            .filter(pk=delivery.subscription_id)
            .order_by()
            .first()
        )
        if subscription is None:  # removed while the try was in flight
            return None
        delivery.last_code = code
        delivery.last_error = error
        delivery.locked_until = None
        if ok:
            delivery.status = DeliveryStatus.DELIVERED
            delivery.delivered_at = now
            delivery.next_try_at = None
            # Written in the event's own transaction: the delivery is as old as the event.
            lag = (now - delivery.created_at).total_seconds()
            metrics.webhook_tried(outcome="delivered", lag=lag)
        else:
            delay = retry_delay(delivery.tries)
            if delay is None:
                delivery.status = DeliveryStatus.FAILED
                delivery.next_try_at = None
            else:
                delivery.next_try_at = now + timedelta(seconds=delay)
            metrics.webhook_tried(outcome="retry" if delay is not None else "failed")
        delivery.save(
            update_fields=[
                "last_code",
                "last_error",
                "locked_until",
                "status",
                "delivered_at",
                "next_try_at",
            ]
        )
        _health(subscription, ok=ok, now=now, error=error or f"answered {code}")
    if not ok:
        log.info("webhook %s: try %s failed: %s", delivery.webhook_id, delivery.tries, error)
    return delivery


def _health(subscription: Subscription, *, ok: bool, now, error: str) -> None:
    if ok:
        if subscription.failing_since is not None:
            subscription.failing_since = None
            subscription.save(update_fields=["failing_since"])
        return
    if subscription.failing_since is None:
        subscription.failing_since = now
        subscription.save(update_fields=["failing_since"])
        return
    failing = (now - subscription.failing_since).total_seconds()
    if subscription.active and failing >= settings.FACTORY_WEBHOOK_DISABLE_AFTER:
        hours = failing / 3600
        subscription.active = False
        subscription.disabled_reason = (
            f"turned off at {now:%Y-%m-%d %H:%M} UTC: no delivery succeeded for {hours:.1f} h;"
            f" the last try: {error}"
        )
        subscription.save(update_fields=["active", "disabled_reason"])
        Event.record(
            subscription,
            actor=None,
            transition="disable",
            from_state="active",
            to_state="inactive",
            reason=subscription.disabled_reason,
        )


def delivery_redeliver(*, delivery: Delivery, actor) -> Delivery:
    """Send a delivery again, with the same ``webhook-id``, whatever became of it.
    Managers only; the subscription must be active."""
    require_role(actor, delivery.subscription.project_id, Role.MANAGER)
    with transaction.atomic():
        delivery = (
            Delivery.objects.select_for_update(no_key=True, of=("self",))
            .select_related("subscription")
            .get(pk=delivery.pk)
        )
        if not delivery.subscription.active:
            raise ValidationError(
                {"subscription": "the subscription is turned off; turn it on first"}
            )
        delivery.status = DeliveryStatus.PENDING
        delivery.next_try_at = timezone.now() + _requeue()
        delivery.locked_until = None
        delivery.save(update_fields=["status", "next_try_at", "locked_until"])
        enqueue_on_commit(DELIVER_JOB, delivery.pk)
    return delivery


def deliveries_prune() -> int:
    """Forget finished deliveries older than ``FACTORY_WEBHOOK_LOG_DAYS`` (the audit trail
    keeps the events themselves); pending ones are never pruned."""
    before = timezone.now() - timedelta(days=settings.FACTORY_WEBHOOK_LOG_DAYS)
    deleted, _ = Delivery.objects.filter(
        status__in=[DeliveryStatus.DELIVERED, DeliveryStatus.FAILED], created_at__lt=before
    ).delete()
    return deleted


def _requeue() -> timedelta:
    return timedelta(seconds=settings.FACTORY_WEBHOOK_REQUEUE_AFTER)


def deliveries_due(*, limit: int = 500) -> int:
    """Start a try for each pending delivery that is due: retries whose time has come,
    first tries whose message was lost, and tries whose worker died (their lease ran out).

    What it sends is not due again for ``FACTORY_WEBHOOK_REQUEUE_AFTER`` seconds, so a
    backlog the workers have not reached yet is not queued twice.
    """
    now = timezone.now()
    ids = list(
        Delivery.objects.filter(status=DeliveryStatus.PENDING, subscription__active=True)
        .filter(Q(next_try_at__lte=now) | Q(locked_until__lte=now))
        .exclude(locked_until__gt=now)
        .order_by("next_try_at")
        .values_list("pk", flat=True)[:limit]
    )
    Delivery.objects.filter(pk__in=ids).update(next_try_at=now + _requeue())
    for pk in ids:
        enqueue(DELIVER_JOB, pk)
    return len(ids)
