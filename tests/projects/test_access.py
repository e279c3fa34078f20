"""Authorize, then validate: every write route of the API declares who may write, and the
kernel checks it before the body is read (projects.access; the matrix in
tests/test_authorization.py walks every route and role)."""

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIRequestFactory, force_authenticate
from rest_framework.views import APIView

from projects.access import Writers
from projects.models import Event, Membership
from projects.roles import Role
from tasks.models import Task

WRITES = ("post", "put", "patch", "delete")


def api_views(patterns=None, prefix=""):
    """``(route, view class)`` of every DRF view the site serves."""
    for entry in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(entry, URLResolver):
            yield from api_views(entry.url_patterns, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            view = getattr(entry.callback, "view_class", None)
            if isinstance(view, type) and issubclass(view, APIView):
                yield prefix + str(entry.pattern), view


def test_every_write_route_of_the_api_declares_who_may_write():
    writes = [(route, view) for route, view in api_views() if any(hasattr(view, m) for m in WRITES)]

    undeclared = [
        route
        for route, view in writes
        if not isinstance(getattr(view, "writers", None), Writers)
        or (view.writers.project_field is None and not hasattr(view, "write_target"))
    ]

    assert len(writes) > 20  # the walk finds the API's routes
    assert undeclared == []


def test_a_write_view_that_declares_no_writers_is_never_served(flow):
    served = []

    class Undeclared(APIView):
        def post(self, request):
            served.append(request.data)

    request = APIRequestFactory().post("/", {"a": 1}, format="json")
    force_authenticate(request, user=flow.manager)

    with pytest.raises(ImproperlyConfigured, match="Undeclared takes POST without declaring"):
        Undeclared.as_view()(request)
    assert served == []


def test_a_caller_who_holds_the_role_in_no_project_is_refused_before_its_body_is_read(flow, api):
    events_before = Event.objects.count()

    response = api(flow.agent).post(
        "/api/v1/tasks/", b"\x00 not json", content_type="application/json"
    )

    assert (response.status_code, response.json()) == (
        403,
        {
            "detail": "this needs the manager role in the project; you hold it in none of yours",
            "code": "permission_denied",
        },
    )
    assert (Task.objects.count(), Event.objects.count()) == (0, events_before)


def test_a_manager_elsewhere_is_refused_in_the_project_its_body_names(flow, other_flow, api):
    Membership.objects.create(user=flow.agent, project=other_flow.project, role=Role.MANAGER)

    named = api(flow.agent).post("/api/v1/tasks/", {"project": "FM", "title": 7}, format="json")
    unreadable = api(flow.agent).post(
        "/api/v1/tasks/", b"\x00 not json", content_type="application/json"
    )

    assert (named.status_code, named.json()["code"]) == (403, "permission_denied")
    assert (unreadable.status_code, unreadable.json()["code"]) == (400, "parse_error")
    assert Task.objects.count() == 0


def test_an_agent_editing_a_task_is_refused_for_its_role_not_for_its_body(flow, api):
    task = flow.draft()
    events_before = Event.objects.count()

    response = api(flow.agent).patch(
        f"/api/v1/tasks/{task.key}/", {"depends_on": ["HO-1"], "line": 0}, format="json"
    )

    assert (response.status_code, response.json()) == (
        403,
        {"detail": "this needs the manager role in the project", "code": "permission_denied"},
    )
    assert (task.depends_on.count(), Event.objects.count()) == (0, events_before)


def test_a_method_a_read_view_does_not_take_is_405_not_a_server_error(flow, api):
    task = flow.draft()

    for method in ("DELETE", "TRACE", "PUT"):
        response = api(flow.manager).generic(method, f"/api/v1/tasks/{task.key}/handoff/")

        assert (response.status_code, response.json()["code"]) == (405, "method_not_allowed")
