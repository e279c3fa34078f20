from django import forms
from django.contrib import admin
from knox.models import AuthToken

from tasks import services
from tasks.admin_actions import ReadOnlyAdmin, ServiceAdmin, service_action
from tasks.models import Attempt, Event, Label, Membership, Project, Task


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    autocomplete_fields = ["user"]


class MembershipSaves:
    """Roles are granted and revoked through the services, so each is in the audit trail."""

    def save_membership(self, request, membership, form, change):
        if change and "role" not in form.changed_data and "user" not in form.changed_data:
            return membership
        if change:
            old = Membership.objects.select_related("user").get(pk=membership.pk)
            self.call(services.membership_revoke, membership=old, actor=request.user)
        return self.call(
            services.membership_grant,
            user=membership.user,
            project=membership.project,
            role=membership.role,
            actor=request.user,
        )

    def revoke(self, request, membership):
        self.call(services.membership_revoke, membership=membership, actor=request.user)


class ProjectAdminForm(forms.ModelForm):
    repository_url = forms.URLField(required=False, assume_scheme="https")

    class Meta:
        model = Project
        fields = ["slug", "name", "repository_url", "gate_policy", "max_attempts"]


@admin.register(Project)
class ProjectAdmin(MembershipSaves, ServiceAdmin):
    form = ProjectAdminForm
    list_display = ["slug", "name", "max_attempts", "created_at"]
    search_fields = ["slug", "name"]
    inlines = [MembershipInline]

    def get_readonly_fields(self, request, obj=None):
        # The slug is every key's prefix: fixed once the project exists.
        return ["slug"] if obj else []

    def has_delete_permission(self, request, obj=None):
        return False  # a project's history is kept; its tasks are cancelled instead

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        if change:
            edited = set(form.changed_data) & services.PROJECT_EDITABLE_FIELDS
            saved = self.call(
                services.project_update,
                project=obj,
                actor=request.user,
                **{name: data[name] for name in edited},
            )
        else:
            saved = self.call(
                services.project_create,
                slug=data["slug"],
                name=data["name"],
                repository_url=data.get("repository_url") or "",
                max_attempts=data.get("max_attempts"),
                gate_policy=data.get("gate_policy"),
                actor=request.user,
            )
        copy_saved(obj, saved)

    def save_formset(self, request, form, formset, change):
        if formset.model is not Membership:
            return super().save_formset(request, form, formset, change)
        formset.save(commit=False)
        for membership in formset.deleted_objects:
            self.revoke(request, membership)
        for inline in formset.forms:
            membership = inline.instance
            if inline in formset.deleted_forms or not inline.has_changed():
                continue
            membership.project = form.instance
            self.save_membership(request, membership, inline, change=membership.pk is not None)
        return None


@admin.register(Membership)
class MembershipAdmin(MembershipSaves, ServiceAdmin):
    list_display = ["user", "project", "role", "created_at"]
    list_filter = ["role", "project"]
    search_fields = ["user__username", "project__slug"]
    autocomplete_fields = ["user"]

    def save_model(self, request, obj, form, change):
        copy_saved(obj, self.save_membership(request, obj, form, change))

    def delete_model(self, request, obj):
        self.revoke(request, obj)

    def delete_queryset(self, request, queryset):
        for membership in queryset.select_related("user"):
            self.revoke(request, membership)


def copy_saved(obj, saved) -> None:
    """Give the admin's ``obj`` the values of the row a service saved (it logs and links it)."""
    for field in type(saved)._meta.concrete_fields:
        if not getattr(field, "protected", False):  # a state field is set by transitions only
            setattr(obj, field.attname, getattr(saved, field.attname))
    obj._state.adding = False


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
