from django.urls import path

from evidence import api

api_patterns = [
    path(
        "attempts/<int:attempt_id>/evidence/",
        api.AttemptEvidenceApi.as_view(),
        name="api-attempt-evidence",
    ),
    path("evidence/<int:evidence_id>/", api.EvidenceDetailApi.as_view(), name="api-evidence"),
    path(
        "evidence/<int:evidence_id>/content/",
        api.EvidenceContentApi.as_view(),
        name="api-evidence-content",
    ),
]
