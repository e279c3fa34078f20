from django.contrib import admin

from codehosts.models import HostAccount, HostDelivery


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


@admin.register(HostAccount)
class HostAccountAdmin(admin.ModelAdmin):
    """Who is who on the code host, read only: a project's managers link and unlink
    through ``codehosts.identities`` (the API), each an Event."""

    list_display = ("project", "login", "host_id", "user", "linked_by", "linked_at")
    list_filter = ("project",)
    search_fields = ("login",)
    readonly_fields = [field.name for field in HostAccount._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
