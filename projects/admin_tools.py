"""The admin changes nothing by itself: its actions and saves call the services.

django-fsm's own admin mixin saves the instance directly, bypassing permissions,
locks and the audit trail; these actions go through the same service as the API
and the review UI, and report each refusal in words. ``ServiceAdmin`` does the same
for the add and change forms: its ``save_model`` calls a service, and a refusal is
shown as a form error on the page the user filled in, never a 500.
"""

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.template.response import TemplateResponse

from projects.errors import ServiceError, refusal_text


class ServiceRefused(Exception):
    """A service refused a save; the admin shows ``error`` on the form and saves nothing."""

    def __init__(self, error: ValidationError):
        super().__init__(error)
        self.error = error


class ServiceAdmin(admin.ModelAdmin):
    """A ModelAdmin whose saves are service calls (``self.call``).

    A refusal raised inside ``save_model`` or ``save_related`` rolls back the admin's
    transaction; the form is then validated once more with the refusal as its error,
    so the page comes back with what the user typed and why it was refused.
    """

    def call(self, service, **kwargs):
        """Call ``service``; its refusal becomes a ``ServiceRefused`` for the form."""
        try:
            return service(**kwargs)
        except ServiceError as exc:
            raise ServiceRefused(ValidationError(exc.detail, code=exc.code)) from exc
        except ValidationError as exc:
            raise ServiceRefused(exc) from exc

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except ServiceRefused as refused:
            # The admin's atomic block has rolled everything back; show the form again.
            request.service_refusal = refused.error
            return super().changeform_view(request, object_id, form_url, extra_context)

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        refusal = getattr(request, "service_refusal", None)
        if refusal is None:
            return form

        class RefusedForm(form):
            def clean(self):
                data = super().clean()
                fields = getattr(refusal, "error_dict", {})
                for name, errors in fields.items():
                    self.add_error(name if name in self.fields else None, errors)
                if not fields:
                    raise refusal
                return data

        return RefusedForm


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
                modeladmin.message_user(request, f"{obj}: {refusal_text(exc)}", messages.ERROR)
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


def copy_saved(obj, saved) -> None:
    """Give the admin's ``obj`` the values of the row a service saved (it logs and links it)."""
    for field in type(saved)._meta.concrete_fields:
        if not getattr(field, "protected", False):  # a state field is set by transitions only
            setattr(obj, field.attname, getattr(saved, field.attname))
    obj._state.adding = False
