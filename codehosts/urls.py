"""Addresses the code hosts call (their webhooks), and the API's (api_patterns)."""

from django.urls import path

from codehosts import api, views

api_patterns = [
    path(
        "projects/<key:slug>/code-host/accounts/",
        api.HostAccountListApi.as_view(),
        name="api-host-accounts",
    ),
    path(
        "projects/<key:slug>/code-host/accounts/<id:host_id>/",
        api.HostAccountDetailApi.as_view(),
        name="api-host-account",
    ),
]

hook_patterns = [
    path("hooks/github/", views.github, name="hooks-github"),
]
