from django.contrib import admin

from tasks import services
from tasks.admin_actions import ReadOnlyAdmin, service_action
from tasks.models import Attempt, Event, Label, Membership, Project, Task


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    autocomplete_fields = ["user"]


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "max_attempts", "created_at"]
    search_fields = ["slug", "name"]
    inlines = [MembershipInline]

    def get_readonly_fields(self, request, obj=None):
        # The slug is every key's prefix: fixed once the project exists.
        return ["slug"] if obj else []


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "project", "role", "created_at"]
    list_filter = ["role", "project"]
    search_fields = ["user__username", "project__slug"]
    autocomplete_fields = ["user"]


@admin.register(Label)
class LabelAdmin(admin.ModelAdmin):
    list_display = ["name", "project"]
    list_filter = ["project"]
    search_fields = ["name"]


class AttemptInline(admin.TabularInline):
    model = Attempt
    fields = ["number", "agent", "state", "lease_expires_at", "submitted_at", "end_reason"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = ["key", "title", "state", "priority", "attempt_count", "updated_at"]
    list_filter = ["state", "project", "labels"]
    search_fields = ["key", "title", "description"]
    readonly_fields = ["key", "state", "attempt_count", "failed_attempts", "current_attempt"]
    filter_horizontal = ["labels", "depends_on"]
    inlines = [AttemptInline]
    actions = [
        service_action(services.task_publish, name="publish", description="Publish", target="task"),
        service_action(services.task_unblock, name="unblock", description="Unblock", target="task"),
        service_action(services.task_reopen, name="reopen", description="Reopen", target="task"),
        service_action(
            services.task_cancel,
            name="cancel",
            description="Cancel",
            target="task",
            needs_reason=True,
        ),
    ]

    def get_readonly_fields(self, request, obj=None):
        return [*self.readonly_fields, "project"] if obj else self.readonly_fields

    def save_model(self, request, obj, form, change):
        if change:
            super().save_model(request, obj, form, change)
            return
        # A new task takes its key and first event from the one service that creates tasks.
        data = form.cleaned_data
        form.instance = services.task_create(
            project=data["project"],
            actor=request.user,
            title=data["title"],
            description=data["description"],
            spec=data.get("spec"),
            priority=data["priority"],
            labels=[label.name for label in data.get("labels", [])],
            depends_on=data.get("depends_on", []),
            allowed_paths=data.get("allowed_paths") or [],
            max_attempts=data.get("max_attempts"),
        )
        obj.pk = form.instance.pk

    def save_related(self, request, form, formsets, change):
        if change:
            super().save_related(request, form, formsets, change)


@admin.register(Attempt)
class AttemptAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "agent", "state", "lease_expires_at", "submitted_at"]
    list_filter = ["state"]
    search_fields = ["task__key", "agent__username"]
    list_select_related = ["task", "agent"]


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "object_key", "transition", "from_state", "to_state", "actor"]
    list_filter = ["transition", "project"]
    search_fields = ["object_key", "reason"]
    list_select_related = ["actor"]
    date_hierarchy = "created_at"
