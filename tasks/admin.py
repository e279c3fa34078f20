"""The admin for tasks and attempts: saves and actions go through the services."""

from django import forms
from django.contrib import admin

from projects.admin_tools import ReadOnlyAdmin, ServiceAdmin, copy_saved, service_action
from tasks import services
from tasks.models import Attempt, Label, Task


@admin.register(Label)
class LabelAdmin(ReadOnlyAdmin):
    """Labels come and go with the tasks that carry them (task edits are recorded)."""

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


class TaskAdminForm(forms.ModelForm):
    class Meta:
        model = Task
        fields = [
            "project",
            "title",
            "description",
            "spec",
            "priority",
            "labels",
            "depends_on",
            "allowed_paths",
            "max_attempts",
        ]


@admin.register(Task)
class TaskAdmin(ServiceAdmin):
    form = TaskAdminForm
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

    def has_delete_permission(self, request, obj=None):
        return False  # a task is cancelled, never deleted: its trail stays whole

    def save_model(self, request, obj, form, change):
        # Both adding and editing go through the services: keys, counters and the trail.
        data = form.cleaned_data
        fields = {
            "title": data["title"],
            "description": data["description"],
            "spec": data.get("spec"),
            "priority": data["priority"],
            "labels": [label.name for label in data.get("labels", [])],
            "depends_on": list(data.get("depends_on", [])),
            "allowed_paths": data.get("allowed_paths") or [],
            "max_attempts": data.get("max_attempts"),
        }
        if change:
            changed = set(form.changed_data) & services.EDITABLE_FIELDS
            saved = self.call(
                services.task_update,
                task=obj,
                actor=request.user,
                **{name: fields[name] for name in changed},
            )
        else:
            saved = self.call(
                services.task_create, project=data["project"], actor=request.user, **fields
            )
        copy_saved(obj, saved)

    def save_related(self, request, form, formsets, change):
        # The services already saved labels and dependencies; only the (read-only)
        # inlines remain, and saving them records nothing but keeps the admin's log whole.
        for formset in formsets:
            self.save_formset(request, form, formset, change=change)


@admin.register(Attempt)
class AttemptAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "agent", "state", "lease_expires_at", "submitted_at"]
    list_filter = ["state"]
    search_fields = ["task__key", "agent__username"]
    list_select_related = ["task", "agent"]
