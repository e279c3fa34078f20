"""Webhook subscriptions and their deliveries: the outbox of the audit trail.

A ``Subscription`` is a project's receiver: where to post, which event types, in which
format, signed with its own secret. A ``Delivery`` is one event owed to one
subscription. It is written in the transaction that writes the audit Event (ADR 0013),
so an event that happened is never without its deliveries and one that rolled back
never has any; its ``webhook_id`` is the same on every try, so a receiver can drop
duplicates. Deliveries are a log of tries, not a state machine of the domain: their
changes are not audit Events (those would owe deliveries of their own).
"""

from django.conf import settings
from django.db import models
from django.utils import timezone

from projects.models import Event, Project


class Format(models.TextChoices):
    STANDARD = "standard-webhooks", "Standard Webhooks (JSON event, signed)"
    COMMIT_STATUS = "commit-status", "Commit status (the code hosts' shape, bearer token)"


class Subscription(models.Model):
    """A receiver of a project's events. Managed by the project's managers, through
    ``events.services``; every change is an audit Event.

    ``secret`` signs every delivery (Standard Webhooks); the API shows it once, when the
    subscription is made. A subscription that has failed for
    ``FACTORY_WEBHOOK_DISABLE_AFTER`` seconds without a success is turned off, and
    ``disabled_reason`` says why.
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="subscriptions")
    url = models.CharField(max_length=2000, help_text="Where to post; events.targets checks it.")
    description = models.CharField(max_length=200, blank=True)
    format = models.CharField(max_length=20, choices=Format.choices, default=Format.STANDARD)
    types = models.JSONField(
        default=list,
        blank=True,
        help_text="Event types wanted; empty for all; `task.*` for a noun.",
    )
    secret = models.CharField(max_length=100, editable=False)
    token = models.CharField(
        max_length=500, blank=True, help_text="Bearer token sent with commit statuses."
    )
    context = models.CharField(
        max_length=100, default="factory-memory", help_text="A commit status's context."
    )
    active = models.BooleanField(default=True)
    disabled_reason = models.TextField(blank=True)
    failing_since = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["pk"]
        indexes = [models.Index(fields=["project", "active"], name="subscription_project")]

    def __str__(self) -> str:
        return f"webhook {self.pk} of {self.project.slug}"

    def audit_scope(self) -> tuple[int, None]:
        return self.project_id, None


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"


class Delivery(models.Model):
    """One event owed to one subscription, and how its tries went.

    ``pending`` until a 2xx answer (``delivered``) or until the retry schedule is spent
    (``failed``; a manager may redeliver). ``locked_until`` is a try's lease: a worker
    that dies mid-try leaves it to expire, and the sweep tries again.
    """

    subscription = models.ForeignKey(
        Subscription, on_delete=models.CASCADE, related_name="deliveries"
    )
    event = models.ForeignKey(Event, on_delete=models.PROTECT, related_name="+")
    type = models.CharField(max_length=40)
    payload = models.JSONField()
    status = models.CharField(
        max_length=10, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING
    )
    tries = models.PositiveIntegerField(default=0)
    next_try_at = models.DateTimeField(null=True, blank=True)
    locked_until = models.DateTimeField(null=True, blank=True)
    last_try_at = models.DateTimeField(null=True, blank=True)
    last_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["-pk"]
        constraints = [
            models.UniqueConstraint(fields=["subscription", "event"], name="delivery_once"),
        ]
        indexes = [
            models.Index(fields=["status", "next_try_at"], name="delivery_due"),
        ]

    def __str__(self) -> str:
        return f"{self.type} #{self.event_id} → webhook {self.subscription_id}"

    @property
    def webhook_id(self) -> str:
        """The ``webhook-id`` header: stable per event and subscription."""
        return f"msg_{self.event_id}_{self.subscription_id}"
