"""Reads for projects: which projects a caller is a member of, with which roles."""

from projects.models import Project
from projects.roles import SUPERUSER_ROLES, roles_by_project


def project_ids_for(user, *roles: str) -> list[int]:
    """Projects where ``user`` holds one of ``roles`` (any role if none given)."""
    if user is None or not user.is_authenticated:
        return []
    if user.is_superuser and (not roles or SUPERUSER_ROLES & set(roles)):
        return list(Project.objects.values_list("pk", flat=True))
    wanted = set(roles)
    return sorted(
        pid for pid, held in roles_by_project(user).items() if not wanted or held & wanted
    )


def visible_project(user, slug: str) -> Project:
    """The project ``slug`` if ``user`` is a member (404 otherwise, so projects don't leak)."""
    return Project.objects.get(pk__in=project_ids_for(user), slug=slug)
