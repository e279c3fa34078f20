"""The admin for specs, versions and decisions: read-only, with accept/reject as actions that call the services."""

from django.contrib import admin

from decisions import services
from decisions.models import Criterion, Decision, Spec, SpecAmendment, SpecVersion
from projects.admin_tools import ReadOnlyAdmin, service_action


class CriterionInline(admin.TabularInline):
    model = Criterion
    fields = ["key", "text", "proof"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


class SpecVersionInline(admin.TabularInline):
    model = SpecVersion
    fields = ["number", "state", "author", "source_decision", "accepted_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Spec)
class SpecAdmin(ReadOnlyAdmin):
    """Specs are written with their versions through the API or UI, which record each
    change; here they are read."""

    list_display = ["key", "title", "project", "created_at"]
    list_filter = ["project"]
    search_fields = ["key", "title"]
    fields = ["key", "project", "title", "created_by", "created_at"]
    inlines = [SpecVersionInline]


@admin.register(SpecVersion)
class SpecVersionAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "state", "author", "source_decision", "accepted_at"]
    list_filter = ["state", "spec__project"]
    search_fields = ["spec__key", "body"]
    inlines = [CriterionInline]
    actions = [
        service_action(
            services.spec_version_accept, name="accept", description="Accept", target="version"
        )
    ]


class SpecAmendmentInline(admin.StackedInline):
    model = SpecAmendment
    fields = ["spec", "base_version", "body", "criteria"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Decision)
class DecisionAdmin(ReadOnlyAdmin):
    list_display = ["key", "title", "state", "proposed_by", "decided_by", "created_at"]
    list_filter = ["state", "project"]
    search_fields = ["key", "title", "context", "decision"]
    inlines = [SpecAmendmentInline]
    actions = [
        service_action(
            services.decision_accept, name="accept", description="Accept", target="decision"
        ),
        service_action(
            services.decision_reject,
            name="reject",
            description="Reject",
            target="decision",
            needs_reason=True,
        ),
    ]
