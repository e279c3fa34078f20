"""The site's addresses: each app's API under /api/v1/, its pages, the admin and the API docs."""

from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularSwaggerSplitView

from codehosts.urls import api_patterns as codehosts_api
from codehosts.urls import hook_patterns
from decisions.urls import api_patterns as decision_api
from decisions.urls import ui_patterns as decision_ui
from events.urls import api_patterns as events_api
from events.urls import ui_patterns as events_ui
from evidence.urls import api_patterns as evidence_api
from evidence.urls import ui_patterns as evidence_ui
from factory_site.metrics import metrics
from factory_site.schema import SchemaView
from interop.urls import api_patterns as interop_api
from interop.urls import ui_patterns as interop_ui
from landing.urls import api_patterns as landing_api
from landing.urls import ui_patterns as landing_ui
from oversight.urls import api_patterns as oversight_api
from oversight.urls import ui_patterns as oversight_ui
from projects.urls import api_patterns as project_api
from projects.urls import sso_patterns
from projects.urls import ui_patterns as project_ui
from projects.views import LoginView
from tasks.urls import api_patterns as task_api
from tasks.urls import ui_patterns as task_ui

urlpatterns = [
    path("admin/", admin.site.urls),
    path("login/", LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("metrics", metrics, name="metrics"),
    *hook_patterns,
    path(
        "api/v1/",
        include(
            project_api
            + task_api
            + oversight_api
            + landing_api
            + decision_api
            + evidence_api
            + events_api
            + interop_api
            + codehosts_api
        ),
    ),
    path("api/schema/", SchemaView.as_view(), name="api-schema"),
    # The split view serves Swagger UI's start-up script as a file of its own (?script) and
    # api_docs.html moves its inline style to a file: the page runs under the site's CSP.
    path(
        "api/docs/",
        SpectacularSwaggerSplitView.as_view(url_name="api-schema", template_name="api_docs.html"),
        name="api-docs",
    ),
    *task_ui,
    *oversight_ui,
    *landing_ui,
    *evidence_ui,
    *project_ui,
    *decision_ui,
    *events_ui,
    *interop_ui,
]

if settings.FACTORY_OIDC_ENABLED:  # off: not one address of it resolves
    urlpatterns += sso_patterns

handler404 = "factory_site.views.not_found"
handler500 = "factory_site.views.server_error"
