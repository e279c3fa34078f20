"""The decisions app: specs, their versions and criteria, and decision records."""

from django.apps import AppConfig


class DecisionsConfig(AppConfig):
    name = "decisions"
    verbose_name = "Specs and decisions"
