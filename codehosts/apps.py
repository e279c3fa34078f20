from django.apps import AppConfig


class CodehostsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "codehosts"
    verbose_name = "Code hosts"
