"""Admin actions that change state by calling the services, never by saving fields.

django-fsm's own admin mixin saves the instance directly, bypassing permissions,
locks and the audit trail; these actions go through the same service as the API
and the review UI, and report each refusal in words.
"""

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.template.response import TemplateResponse

from tasks.errors import ServiceError


def _refusal_text(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(exc.messages)
    return str(exc)


def service_action(service, *, name: str, description: str, target: str, needs_reason=False):
    """Build an admin action that calls ``service(<target>=obj, actor=user, reason=…)`` per row."""

    def action(modeladmin, request, queryset):
        reason = request.POST.get("reason", "").strip()
        if needs_reason and not reason:
            return TemplateResponse(
                request,
                "admin/transition_reason.html",
                {
                    **modeladmin.admin_site.each_context(request),
                    "title": description,
                    "objects": queryset,
                    "action": name,
                    "opts": modeladmin.model._meta,
                    "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
                    "error": "A reason is required." if "reason" in request.POST else "",
                },
            )
        done = 0
        for obj in queryset:
            try:
                service(**{target: obj}, actor=request.user, reason=reason)
                done += 1
            except (ServiceError, ValidationError) as exc:
                modeladmin.message_user(request, f"{obj}: {_refusal_text(exc)}", messages.ERROR)
        if done:
            modeladmin.message_user(request, f"{description}: {done} done.", messages.SUCCESS)
        return None

    action.__name__ = name
    action.short_description = description
    action.allowed_permissions = ("view",)
    return action


class ReadOnlyAdmin(admin.ModelAdmin):
    """Viewable, never added, changed or deleted through the admin."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
