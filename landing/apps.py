from django.apps import AppConfig


class LandingConfig(AppConfig):
    name = "landing"
    verbose_name = "Landing"

    def ready(self):
        # lazy: selectors reach models, which Django loads only once the apps are ready.
        from landing.flaky import record_flaked
        from landing.selectors import queued_keys
        from projects.verify import register_queued
        from runner.signals import flaked

        # The kernel refuses a change of landing.mode while changes wait (ADR 0031's seam).
        register_queued(queued_keys)
        # The runner's gate tells of the flaky tests it saw at a submission (below landing).
        flaked.connect(record_flaked, dispatch_uid="landing.flaky")
