"""Addresses of evidence: the API's (api_patterns) and the pages' (ui_patterns)."""

from django.urls import path

from evidence import api, views

api_patterns = [
    path("evidence/<id:evidence_id>/", api.EvidenceDetailApi.as_view(), name="api-evidence"),
    path(
        "evidence/<id:evidence_id>/content/",
        api.EvidenceContentApi.as_view(),
        name="api-evidence-content",
    ),
]

ui_patterns = [
    path("evidence/<id:evidence_id>/", views.evidence_detail, name="evidence-detail"),
    path("evidence/<id:evidence_id>/image/", views.evidence_image, name="evidence-image"),
]
