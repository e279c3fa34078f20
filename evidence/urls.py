from django.urls import path

import factory_site.converters  # noqa: F401  (registers <id:…>)
from evidence import api

api_patterns = [
    path(
        "attempts/<id:attempt_id>/evidence/",
        api.AttemptEvidenceApi.as_view(),
        name="api-attempt-evidence",
    ),
    path("evidence/<id:evidence_id>/", api.EvidenceDetailApi.as_view(), name="api-evidence"),
    path(
        "evidence/<id:evidence_id>/content/",
        api.EvidenceContentApi.as_view(),
        name="api-evidence-content",
    ),
]
