from django.apps import AppConfig


class LandingConfig(AppConfig):
    name = "landing"
    verbose_name = "Landing"

    def ready(self):
        # lazy: selectors reach models, which Django loads only once the apps are ready.
        from landing.selectors import queued_keys
        from projects.verify import register_queued

        # The kernel refuses a change of landing.mode while changes wait (ADR 0031's seam).
        register_queued(queued_keys)
