"""What a code host told the site: its webhook deliveries, kept once each."""

from django.db import models
from django.utils import timezone

from projects.models import Project


class HostDelivery(models.Model):
    """A webhook delivery whose signature matched the secret of the project following its
    repository (``codehosts.services.delivery_receive``).

    Kept once per delivery id: GitHub's manual redelivery reuses the id, so a delivery
    received twice is skipped. The id is not signed, so a captured body sent again under
    another id is kept again; acting on a delivery re-reads the object from the host, so
    the same body twice comes to the same result. No secret and not the body are kept:
    the body's SHA-256, and what names the object it is about (``subject``).
    """

    provider = models.CharField(max_length=20)
    delivery_id = models.CharField(max_length=100, help_text="X-GitHub-Delivery: a GUID.")
    event = models.CharField(max_length=100, help_text="X-GitHub-Event: pull_request, issues…")
    action = models.CharField(max_length=100, blank=True)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="host_deliveries")
    subject = models.JSONField(
        default=dict,
        blank=True,
        help_text="What the delivery is about, to re-read from the host: the repository, "
        "a pull request's or an issue's number, a commit.",
    )
    body_sha256 = models.CharField(max_length=64)
    received_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        verbose_name_plural = "deliveries"
        ordering = ["-received_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "delivery_id"], name="host_delivery_once_per_id"
            )
        ]

    def __str__(self) -> str:
        return f"{self.provider} {self.event}.{self.action} {self.delivery_id}"
