"""The events app: the audit trail's events, out: webhooks (an outbox) and the live stream."""

from django.apps import AppConfig


class EventsConfig(AppConfig):
    name = "events"
    verbose_name = "Events out: webhooks and the live stream"

    def ready(self):
        # lazy: receivers reach models, which Django loads only once the apps are ready.
        from events.receivers import write_outbox
        from projects.signals import event_recorded

        event_recorded.connect(write_outbox, dispatch_uid="events.outbox")
