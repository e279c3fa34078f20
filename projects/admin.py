"""The admin for projects, memberships, single sign-on identities, users, API tokens and the
audit trail.

Saves go through the services (``ServiceAdmin``): a role granted or revoked here is
recorded like any other, and a refusal is a form error.
"""

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import admin as auth_admin
from django.contrib.auth import get_user_model
from django.contrib.contenttypes.models import ContentType
from django.shortcuts import redirect
from django.utils.html import format_html_join
from django.utils.safestring import mark_safe
from knox.models import AuthToken

from projects import services
from projects.admin_tools import ReadOnlyAdmin, ServiceAdmin, ServiceRefused, copy_saved
from projects.errors import refusal_text
from projects.models import Event, Identity, Membership, Project


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
        fields = [
            "slug",
            "name",
            "repository_url",
            "gate_policy",
            "landing",
            "claim_avoid_overlap",
            "max_attempts",
            "budget_usd",
            "prices",
        ]


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
    list_display = ["user", "project", "role", "from_provider", "created_at"]
    list_filter = ["role", "project", "from_provider"]
    search_fields = ["user__username", "project__slug"]
    autocomplete_fields = ["user"]

    def save_model(self, request, obj, form, change):
        copy_saved(obj, self.save_membership(request, obj, form, change))

    def delete_model(self, request, obj):
        self.revoke(request, obj)

    def delete_queryset(self, request, queryset):
        for membership in queryset.select_related("user"):
            self.revoke(request, membership)


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "object_key", "transition", "from_state", "to_state", "actor"]
    list_filter = ["transition", "project"]
    search_fields = ["object_key", "reason"]
    list_select_related = ["actor"]
    date_hierarchy = "created_at"


LINK_WORDS = {"link": "linked to", "relink": "pointed at", "unlink": "unlinked from"}


@admin.register(Identity)
class IdentityAdmin(ServiceAdmin):
    """Which provider account signs in as which user (ADR 0018, ADR 0022).

    A person who had a password account before single sign-on gets a second account at
    their first sign-in: pointing the identity at the first account merges them (the
    second keeps its history and can be deactivated). An identity added by hand links a
    provider's subject to an account before its first sign-in; one deleted signs in next
    time as a new account. The pair itself is fixed once saved: it is what the provider
    asserts, not something to edit. Every save and deletion is ``identity_link`` or
    ``identity_unlink``: only a superuser links to, changes or deletes an identity of a
    staff or superuser account, and each is an Event naming who did it.
    """

    list_display = ["subject", "issuer", "user", "created_at"]
    list_filter = ["issuer"]
    search_fields = ["subject", "issuer", "user__username", "user__email"]
    list_select_related = ["user"]
    autocomplete_fields = ["user"]
    fields = ["issuer", "subject", "user", "created_at", "trail"]

    def get_readonly_fields(self, request, obj=None):
        return ["issuer", "subject", "created_at", "trail"] if obj else ["created_at", "trail"]

    def get_actions(self, request):
        # One at a time, through identity_unlink: a bulk delete would log rows it refused.
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    @admin.display(description="Links")
    def trail(self, obj):
        if obj is None or obj.pk is None:
            return "—"
        events = Event.objects.filter(
            content_type=ContentType.objects.get_for_model(Identity), object_id=obj.pk
        ).select_related("actor")
        return (
            format_html_join(
                mark_safe("<br>"),
                "{} {} {} by {}",
                (
                    (
                        f"{e.created_at:%Y-%m-%d %H:%M}",
                        LINK_WORDS.get(e.transition, e.transition),
                        e.extra.get("user", ""),
                        e.actor_label,
                    )
                    for e in events
                ),
            )
            or "—"
        )

    def save_model(self, request, obj, form, change):
        if change and "user" not in form.changed_data:
            return
        saved = self.call(
            services.identity_link,
            user=form.cleaned_data["user"],
            actor=request.user,
            **({"identity": obj} if change else {"issuer": obj.issuer, "subject": obj.subject}),
        )
        copy_saved(obj, saved)

    def delete_model(self, request, obj):
        self.call(services.identity_unlink, identity=obj, actor=request.user)

    def delete_view(self, request, object_id, extra_context=None):
        try:
            return super().delete_view(request, object_id, extra_context)
        except ServiceRefused as refused:
            # The admin's atomic block has rolled back its log entry; the identity stays.
            self.message_user(request, refusal_text(refused.error), messages.ERROR)
            return redirect("admin:projects_identity_change", object_id)


User = get_user_model()
admin.site.unregister(User)


@admin.register(User)
class UserAdmin(auth_admin.UserAdmin):
    """Django's own, except for someone who is not a superuser (ADR 0022): they change no
    staff or superuser account (its password included), give no one the staff or
    superuser flag, a group or a permission, and the identity page's search for a user
    offers them no staff or superuser account (they could not link it). Django's own
    page let whoever may change users make themselves superuser."""

    GRANTING = ("is_staff", "is_superuser", "groups", "user_permissions")

    def has_change_permission(self, request, obj=None):
        if obj is not None and _is_staff(obj) and not request.user.is_superuser:
            return False  # the password page asks this too
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        if obj is not None and _is_staff(obj) and not request.user.is_superuser:
            return False
        return super().has_delete_permission(request, obj)

    def get_readonly_fields(self, request, obj=None):
        fields = super().get_readonly_fields(request, obj)
        return fields if request.user.is_superuser else [*fields, *self.GRANTING]

    def get_search_results(self, request, queryset, search_term):
        queryset, duplicates = super().get_search_results(request, queryset, search_term)
        for_identity = (
            request.resolver_match is not None
            and request.resolver_match.url_name == "autocomplete"
            and (request.GET.get("app_label"), request.GET.get("model_name"))
            == ("projects", "identity")
        )
        if for_identity and not request.user.is_superuser:
            queryset = queryset.filter(is_staff=False, is_superuser=False)
        return queryset, duplicates


def _is_staff(user) -> bool:
    return user.is_staff or user.is_superuser


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
