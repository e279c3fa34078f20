"""Addresses of the webhooks API (api_patterns) and pages (ui_patterns)."""

from django.urls import path

from events import api, views

api_patterns = [
    path(
        "projects/<key:slug>/webhooks/",
        api.SubscriptionListApi.as_view(),
        name="api-webhooks",
    ),
    path(
        "projects/<key:slug>/webhooks/<id:pk>/",
        api.SubscriptionDetailApi.as_view(),
        name="api-webhook",
    ),
    path(
        "projects/<key:slug>/webhooks/<id:pk>/deliveries/",
        api.DeliveryListApi.as_view(),
        name="api-webhook-deliveries",
    ),
    path(
        "projects/<key:slug>/webhooks/<id:pk>/deliveries/<id:delivery>/redeliver/",
        api.DeliveryRedeliverApi.as_view(),
        name="api-webhook-redeliver",
    ),
    path("events/stream", views.stream, name="api-events-stream"),
]

ui_patterns = [
    path("webhooks/", views.webhooks_index, name="webhooks-index"),
    path("projects/<key:slug>/webhooks/", views.webhooks, name="webhooks"),
    path("projects/<key:slug>/webhooks/<id:pk>/", views.webhook, name="webhook"),
]
