"""Authorize, then validate: who may write through the API, checked before a body is read.

Every API view that writes (POST, PUT, PATCH, DELETE) declares ``writers``: the rule its
caller must pass in the project of what it acts on, one of ``projects.roles``' rules (the
ones the state machines' transitions check: ``MANAGER``, ``HOLDER``, ``DECIDER``…).
``WritersFirst``, in DRF's default permission classes, checks it after authentication and
before the view reads its body, so a caller without the right gets the same refusal
whatever it sent: 403 (the rule's code), or 404 for an object outside its projects. The
services keep their checks as the final word; this is the early refusal at the edge (ADR
0025). A write view that declares nothing is refused by the server (ImproperlyConfigured),
never served unchecked.

Kept apart from ``projects.rest``: DRF reads its default permission classes when
``rest_framework.views`` is imported, which ``projects.rest`` itself imports.
"""

from collections.abc import Mapping
from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured
from rest_framework.permissions import SAFE_METHODS, BasePermission

from projects.errors import PermissionDenied
from projects.models import Project
from projects.roles import Rule
from projects.selectors import project_for, project_ids_for


@dataclass(frozen=True)
class ProjectScope:
    """A project as a rule sees an object in it: for a write that acts on the project."""

    fsm_project_id: int
    holder_id: None = None


@dataclass(frozen=True)
class Writers:
    """Who may write through a view.

    ``rule`` is checked on what ``view.write_target(request, **url_kwargs)`` returns (an
    object with ``fsm_project_id``, a ``Project``, or an object with ``project_id``),
    which the view then finds as ``self.target``. Name the object that fixes the project
    (the project, task, attempt, spec or decision in the URL), and look up what lies
    inside it after, so that a member without the right learns nothing of what exists.

    ``project_field``: the write names its project in the body, in this one field (``POST
    /api/v1/tasks/ {project}``); ``rule`` must then be a role rule. The caller must pass it
    in one of its projects before the body is read, then in the project named, if any.
    """

    rule: Rule
    project_field: str | None = None


def scope_of(target) -> object:
    """What a rule checks for ``target``: itself, or its project as a ``ProjectScope``."""
    if isinstance(target, Project):
        return ProjectScope(target.pk)
    if hasattr(target, "fsm_project_id"):
        return target
    return ProjectScope(target.project_id)


def _refuse(refusal) -> None:
    if refusal:
        code, reason = refusal
        raise PermissionDenied(reason, code=code)


class WritersFirst(BasePermission):
    """Checks the view's ``writers`` for every unsafe method, before the body is read."""

    def has_permission(self, request, view):
        if request.method in SAFE_METHODS or not hasattr(view, request.method.lower()):
            return True  # a method the view does not take is DRF's 405
        writers = getattr(view, "writers", None)
        if not isinstance(writers, Writers):
            raise ImproperlyConfigured(
                f"{type(view).__name__} takes {request.method} without declaring its writers"
            )
        user = request.user
        if writers.project_field is None:
            view.target = view.write_target(request, **view.kwargs)
            _refuse(writers.rule.refusal(scope_of(view.target), user))
            return True
        # The roles are cached with the user (loaded with its token): no query here. Asked of
        # no project (id 0), the rule still admits a superuser for a manager's write.
        if not any(writers.rule(ProjectScope(pid), user) for pid in project_ids_for(user)) and (
            refusal := writers.rule.refusal(ProjectScope(0), user)
        ):
            code, reason = refusal
            raise PermissionDenied(f"{reason}; you hold it in none of yours", code=code)
        # Only now is the body read (a body that does not parse is the caller's 400).
        data = request.data
        slug = data.get(writers.project_field) if isinstance(data, Mapping) else None
        # A name no project has (a NUL is no slug's) is the serializer's to refuse.
        if isinstance(slug, str) and slug and "\x00" not in slug:
            view.target = ProjectScope(project_for(user, slug).pk)  # 404 outside its projects
            _refuse(writers.rule.refusal(view.target, user))
        return True
