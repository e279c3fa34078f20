"""Addresses of the interop API."""

from django.urls import path

from interop import api, views

api_patterns = [
    path("projects/<key:slug>/imports/", api.ImportListApi.as_view(), name="api-imports"),
    path(
        "projects/<key:slug>/imports/<id:run_id>/", api.ImportDetailApi.as_view(), name="api-import"
    ),
    path(
        "projects/<key:slug>/imports/<id:run_id>/apply/",
        api.ImportApplyApi.as_view(),
        name="api-import-apply",
    ),
    path(
        "projects/<key:slug>/exports/<str:export_format>/",
        api.ExportApi.as_view(),
        name="api-export",
    ),
]

ui_patterns = [
    path("imports/", views.imports_index, name="imports-index"),
    path("projects/<key:slug>/imports/", views.imports, name="imports"),
    path("projects/<key:slug>/imports/<id:run_id>/", views.import_detail, name="import-detail"),
    path(
        "projects/<key:slug>/imports/<id:run_id>/apply/",
        views.import_apply,
        name="import-apply",
    ),
]
