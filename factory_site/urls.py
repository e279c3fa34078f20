from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from decisions.urls import api_patterns as decision_api
from evidence.urls import api_patterns as evidence_api
from tasks.urls import api_patterns as task_api

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include(task_api + decision_api + evidence_api)),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
]
