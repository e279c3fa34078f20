"""Addresses of specs and decisions: the API's (api_patterns) and the pages' (ui_patterns)."""

from django.urls import path

from decisions import api, views

api_patterns = [
    path("specs/", api.SpecListCreateApi.as_view(), name="api-specs"),
    path("specs/<key:key>/", api.SpecDetailApi.as_view(), name="api-spec"),
    path("specs/<key:key>/versions/", api.SpecVersionCreateApi.as_view(), name="api-spec-versions"),
    path(
        "specs/<key:key>/versions/<id:number>/",
        api.SpecVersionDetailApi.as_view(),
        name="api-spec-version",
    ),
    path(
        "specs/<key:key>/versions/<id:number>/accept/",
        api.SpecVersionAcceptApi.as_view(),
        name="api-spec-version-accept",
    ),
    path("decisions/", api.DecisionListCreateApi.as_view(), name="api-decisions"),
    path("decisions/<key:key>/", api.DecisionDetailApi.as_view(), name="api-decision"),
    path(
        "decisions/<key:key>/impact/", api.DecisionImpactApi.as_view(), name="api-decision-impact"
    ),
    path(
        "decisions/<key:key>/accept/", api.DecisionAcceptApi.as_view(), name="api-decision-accept"
    ),
    path(
        "decisions/<key:key>/reject/", api.DecisionRejectApi.as_view(), name="api-decision-reject"
    ),
]

ui_patterns = [
    path("decisions/", views.decision_log, name="decision-log"),
    path("decisions/<key:key>/", views.decision_detail, name="decision-detail"),
    path("decisions/<key:key>/<str:verdict>/", views.decision_verdict, name="decision-verdict"),
    path("specs/<key:key>/", views.spec_detail, name="spec-detail"),
]
