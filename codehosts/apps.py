from django.apps import AppConfig


class CodehostsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "codehosts"
    verbose_name = "Code hosts"

    def ready(self):
        # lazy: services reach models, which Django loads only once the apps are ready.
        from codehosts.landing import HostLanding, target_check
        from codehosts.receivers import sync_on_event
        from codehosts.services import code_host_reach
        from landing import through_host
        from projects import hosts
        from projects.signals import event_recorded

        # The kernel's project service reaches the host at save through this (ADR 0031).
        hosts.register_reach(code_host_reach)
        hosts.register_target_check(target_check)
        # The lander lands through a task's pull request through this (ADR 0041).
        through_host.register(HostLanding)
        # A change a task's pull request shows starts a job after it commits (ADR 0038).
        event_recorded.connect(sync_on_event, dispatch_uid="codehosts.pull_requests")
