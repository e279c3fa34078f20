"""The manager's view: the plan, the costs and the dashboard, their pages and API. It reads
tasks and landing and writes nothing."""

from django.apps import AppConfig


class OversightConfig(AppConfig):
    name = "oversight"
    verbose_name = "The manager's view"
