"""Addresses of the merge queue: the API's (api_patterns) and the pages' (ui_patterns)."""

from django.urls import path

from landing import api, views

api_patterns = [
    path("projects/<key:slug>/landing/", api.LandingApi.as_view(), name="api-landing"),
    path(
        "projects/<key:slug>/landing/retry/",
        api.LandingRetryApi.as_view(),
        name="api-landing-retry",
    ),
    path(
        "projects/<key:slug>/landing/pause/",
        api.LandingPauseApi.as_view(),
        name="api-landing-pause",
    ),
    path(
        "projects/<key:slug>/landing/resume/",
        api.LandingResumeApi.as_view(),
        name="api-landing-resume",
    ),
    path(
        "projects/<key:slug>/landing/flaky/",
        api.LandingFlakyApi.as_view(),
        name="api-landing-flaky",
    ),
    path(
        "projects/<key:slug>/landing/<key:key>/fast/",
        api.LandingFastApi.as_view(),
        name="api-landing-fast",
    ),
    path(
        "projects/<key:slug>/landing/<key:key>/dequeue/",
        api.LandingDequeueApi.as_view(),
        name="api-landing-dequeue",
    ),
    path("tasks/<key:key>/revert/", api.TaskRevertApi.as_view(), name="api-task-revert"),
    path(
        "tasks/<key:key>/revert/cancel/",
        api.TaskRevertCancelApi.as_view(),
        name="api-task-revert-cancel",
    ),
]

ui_patterns = [
    path("landing/", views.landing_index, name="landing-index"),
    path("projects/<key:slug>/landing/", views.landing, name="landing"),
    path("projects/<key:slug>/landing/retry/", views.landing_retry, name="landing-retry"),
    path("projects/<key:slug>/landing/pause/", views.landing_pause, name="landing-pause"),
    path("projects/<key:slug>/landing/resume/", views.landing_resume, name="landing-resume"),
    path("projects/<key:slug>/landing/flaky/", views.landing_quarantine, name="landing-flaky"),
    path("projects/<key:slug>/landing/<key:key>/fast/", views.landing_fast, name="landing-fast"),
    path(
        "projects/<key:slug>/landing/<key:key>/dequeue/",
        views.landing_dequeue,
        name="landing-dequeue",
    ),
    path(
        "projects/<key:slug>/landing/<key:key>/revert/",
        views.landing_revert,
        name="landing-revert",
    ),
    path(
        "projects/<key:slug>/landing/<key:key>/revert/cancel/",
        views.landing_revert_cancel,
        name="landing-revert-cancel",
    ),
]
