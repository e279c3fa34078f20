from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from knox.models import AuthToken

from tasks import services
from tasks.admin_actions import ReadOnlyAdmin, service_action
from tasks.models import Attempt, Event, Label, Membership, Project, Task


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    autocomplete_fields = ["user"]


class ProjectAdminForm(forms.ModelForm):
    repository_url = forms.URLField(required=False, assume_scheme="https")

    class Meta:
        model = Project
        fields = ["slug", "name", "repository_url", "gate_policy", "max_attempts"]

    def clean_gate_policy(self):
        from evidence.gates import clean_policy

        try:
            return clean_policy(self.cleaned_data["gate_policy"])
        except ValidationError as exc:
            raise ValidationError(exc.message_dict["gate_policy"]) from None


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    form = ProjectAdminForm
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


class TaskAdminForm(forms.ModelForm):
    """Validates with the same rules the services apply, so a refusal is a form error."""

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

    def clean(self):
        data = super().clean()
        task = self.instance if self.instance.pk else None
        if task is not None and task.state not in services.EDITABLE_STATES:
            raise ValidationError(
                f"{task} is {task.state}; only draft, ready or blocked tasks are edited"
            )
        project = data.get("project") or (task.project if task else None)
        if project is not None:
            data["allowed_paths"] = services.clean_task_links(
                project=project,
                spec=data.get("spec"),
                depends_on=data.get("depends_on") or (),
                allowed_paths=data.get("allowed_paths") or [],
                task=task,
            )
        return data


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
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
            saved = services.task_update(
                task=obj, actor=request.user, **{name: fields[name] for name in changed}
            )
        else:
            saved = services.task_create(project=data["project"], actor=request.user, **fields)
        # The admin logs and links ``obj``: give it the saved row's values.
        for field in Task._meta.concrete_fields:
            if field.name != "state":
                setattr(obj, field.attname, getattr(saved, field.attname))
        obj._state.adding = False

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


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "object_key", "transition", "from_state", "to_state", "actor"]
    list_filter = ["transition", "project"]
    search_fields = ["object_key", "reason"]
    list_select_related = ["actor"]
    date_hierarchy = "created_at"


# knox's own admin issues a token for any user with any expiry, past the bounds of
# tasks.tokens; here tokens are only listed and revoked (deleted). Issue them on the API
# tokens page or with `manage.py issue_token`.
admin.site.unregister(AuthToken)


@admin.register(AuthToken)
class AuthTokenAdmin(admin.ModelAdmin):
    list_display = ["token_key", "user", "created", "expiry"]
    search_fields = ["token_key", "user__username"]
    list_filter = ["expiry"]  # "No date": tokens from before every token had to expire
    fields = ["token_key", "user", "created", "expiry"]

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False
