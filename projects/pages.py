"""What every page of the review UI shares: who is looking, in which projects, what they
may do, and whether the browser asked for a partial (htmx)."""

from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.http import Http404

from projects.errors import ServiceError
from projects.fsm import check
from projects.models import Project
from projects.roles import SUPERUSER_ROLES, Role, roles_by_project
from projects.selectors import project_ids_for


def is_htmx(request) -> bool:
    return request.headers.get("HX-Request") == "true"


def navigation(request):
    """What the top bar shows: the user's roles across their projects (a context processor)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    roles = set().union(*roles_by_project(user).values())
    if user.is_superuser:
        roles |= SUPERUSER_ROLES
    # Pages update live when the event stream is reachable: served through ASGI, or
    # routed by the proxy to an ASGI process beside a WSGI site (docs/deploy.md).
    live = isinstance(request, ASGIRequest) or settings.FACTORY_STREAM_ROUTED
    return {"nav_roles": sorted(roles), "live_stream": live}


def user_projects(user) -> list[Project]:
    """The projects ``user`` is a member of, by slug: what the project filters offer."""
    return list(Project.objects.filter(pk__in=project_ids_for(user)).order_by("slug"))


def managed_project(user, slug: str) -> Project:
    """The project ``slug`` if ``user`` manages it; a 404 otherwise (a page for managers
    says nothing of projects the user does not manage)."""
    project = Project.objects.filter(slug=slug, pk__in=project_ids_for(user, Role.MANAGER)).first()
    if project is None:
        raise Http404("no such project among those you manage")
    return project


def in_project(queryset, projects: list[Project], slug: str):
    """``queryset`` narrowed to the chosen project of ``projects`` (all of them when none)."""
    if slug:
        return queryset.filter(project__in=[p for p in projects if p.slug == slug])
    return queryset


def may(obj, transition: str, user) -> bool:
    """Whether ``user`` may fire ``transition`` on ``obj`` now: the page offers only what
    the service would do (the same check, ``projects.fsm.check``)."""
    try:
        check(obj, transition, actor=user)
    except ServiceError:
        return False
    return True
