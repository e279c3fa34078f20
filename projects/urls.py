"""Addresses of projects and tokens: the API's (api_patterns) and the pages' (ui_patterns),
and single sign-on's (sso_patterns: the site routes them only when it is configured)."""

from django.urls import path
from mozilla_django_oidc.views import (
    OIDCAuthenticationCallbackView,
    OIDCAuthenticationRequestView,
)

from projects import api, views

api_patterns = [
    path("projects/", api.ProjectListApi.as_view(), name="api-projects"),
    path("projects/<key:slug>/", api.ProjectDetailApi.as_view(), name="api-project"),
]

ui_patterns = [
    path("tokens/", views.tokens, name="tokens"),
    path("tokens/revoke/", views.token_revoke, name="token-revoke"),
]

# The names are the ones mozilla-django-oidc reverses; the callback is the redirect URI
# registered at the identity provider (docs/deploy.md).
sso_patterns = [
    path(
        "oidc/authenticate/",
        OIDCAuthenticationRequestView.as_view(),
        name="oidc_authentication_init",
    ),
    path(
        "oidc/callback/",
        OIDCAuthenticationCallbackView.as_view(),
        name="oidc_authentication_callback",
    ),
]
