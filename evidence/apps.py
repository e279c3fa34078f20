"""The evidence app: evidence files, gate runs and the gates."""

from django.apps import AppConfig


class EvidenceConfig(AppConfig):
    name = "evidence"
    verbose_name = "Evidence and gates"
