"""The admin for evidence and gate runs: both read-only (evidence is immutable; runs change only through their jobs)."""

from django.contrib import admin

from evidence.models import Evidence, GateRun
from projects.admin_tools import ReadOnlyAdmin


@admin.register(Evidence)
class EvidenceAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "attempt", "kind", "provenance", "size", "created_at"]
    list_filter = ["kind", "provenance"]
    search_fields = ["sha256", "name", "attempt__task__key"]
    list_select_related = ["attempt__task"]


@admin.register(GateRun)
class GateRunAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "gate", "state", "tries", "summary", "finished_at"]
    list_filter = ["gate", "state"]
    search_fields = ["attempt__task__key", "gate"]
    list_select_related = ["attempt__task"]
