"""Addresses of projects and tokens: the API's (api_patterns) and the pages' (ui_patterns)."""

from django.urls import path

from projects import api, views

api_patterns = [
    path("projects/", api.ProjectListApi.as_view(), name="api-projects"),
    path("projects/<key:slug>/", api.ProjectDetailApi.as_view(), name="api-project"),
]

ui_patterns = [
    path("tokens/", views.tokens, name="tokens"),
    path("tokens/revoke/", views.token_revoke, name="token-revoke"),
]
