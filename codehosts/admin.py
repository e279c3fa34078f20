from django.contrib import admin

from codehosts.models import HostDelivery


@admin.register(HostDelivery)
class DeliveryAdmin(admin.ModelAdmin):
    """The deliveries a code host sent: read only, as the host sent them."""

    list_display = ("received_at", "project", "event", "action", "delivery_id")
    list_filter = ("provider", "event")
    search_fields = ("delivery_id",)
    readonly_fields = [field.name for field in HostDelivery._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
