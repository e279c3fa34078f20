"""Webhooks in the admin: subscriptions are changed through the services (each an audit
Event, a refusal a form error); deliveries are a read-only log."""

from django.contrib import admin, messages

from events import services
from events.models import Delivery, Subscription
from projects.admin_tools import ReadOnlyAdmin, ServiceAdmin, copy_saved


@admin.register(Subscription)
class SubscriptionAdmin(ServiceAdmin):
    list_display = ["pk", "project", "url", "format", "active", "failing_since"]
    list_filter = ["project", "active", "format"]
    fields = ["project", "url", "description", "format", "types", "token", "context", "active"]

    def get_readonly_fields(self, request, obj=None):
        return ["project", "disabled_reason"] if obj else []

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        if change:
            edited = set(form.changed_data) & services.EDITABLE
            saved = self.call(
                services.subscription_update,
                subscription=obj,
                actor=request.user,
                **{name: data[name] for name in edited},
            )
            if saved.token_cleared:
                messages.warning(request, "The URL changed, so its token was cleared.")
        else:
            saved = self.call(
                services.subscription_create,
                project=data["project"],
                actor=request.user,
                **{
                    k: data[k]
                    for k in ("url", "types", "format", "description", "token", "context")
                },
            )
            messages.info(request, f"The signing secret, shown this once: {saved.secret}")
        copy_saved(obj, saved)

    def delete_model(self, request, obj):
        self.call(services.subscription_delete, subscription=obj, actor=request.user)

    def delete_queryset(self, request, queryset):
        for subscription in queryset:
            self.delete_model(request, subscription)


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    list_display = ["pk", "type", "subscription", "status", "tries", "last_code", "next_try_at"]
    list_filter = ["status", "type"]
