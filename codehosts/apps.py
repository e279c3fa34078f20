from django.apps import AppConfig


class CodehostsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "codehosts"
    verbose_name = "Code hosts"

    def ready(self):
        # lazy: services reach models, which Django loads only once the apps are ready.
        from codehosts.services import code_host_reach
        from projects import hosts

        # The kernel's project service reaches the host at save through this (ADR 0031).
        hosts.register_reach(code_host_reach)
