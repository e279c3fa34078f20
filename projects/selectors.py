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


def project_for(user, slug: str) -> Project:
    """The project ``slug`` as a reference (its id and slug) if ``user`` is a member;
    ``Project.DoesNotExist`` (a 404) otherwise.

    For callers that only pass the project on (the claim): when the user came with a
    bearer token, the memberships read with it answer without a query.
    """
    slugs = getattr(user, "_factory_slugs", None)
    if slugs is None or user.is_superuser:  # a superuser sees projects it is no member of
        return visible_project(user, slug)
    if slug not in slugs or slugs[slug] not in project_ids_for(user):
        raise Project.DoesNotExist(f"no project {slug} among yours")
    return Project(pk=slugs[slug], slug=slug)
