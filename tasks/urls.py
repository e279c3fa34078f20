"""Addresses of tasks and attempts: the API's (api_patterns) and the pages' (ui_patterns)."""

from django.urls import path

from tasks import api, api_attempts, api_review, views

api_patterns = [
    path("tasks/", api.TaskListCreateApi.as_view(), name="api-tasks"),
    path("tasks/claim/", api_attempts.TaskClaimApi.as_view(), name="api-task-claim"),
    path("tasks/<key:key>/", api.TaskDetailApi.as_view(), name="api-task"),
    path("tasks/<key:key>/context/", api.TaskContextApi.as_view(), name="api-task-context"),
    path("tasks/<key:key>/handoff/", api.TaskHandoffApi.as_view(), name="api-task-handoff"),
    path("tasks/<key:key>/events/", api.TaskEventsApi.as_view(), name="api-task-events"),
    path("tasks/<key:key>/review/", api_review.TaskReviewApi.as_view(), name="api-task-review"),
    path("tasks/<key:key>/publish/", api.TaskPublishApi.as_view(), name="api-task-publish"),
    path("tasks/<key:key>/unblock/", api.TaskUnblockApi.as_view(), name="api-task-unblock"),
    path("tasks/<key:key>/reopen/", api.TaskReopenApi.as_view(), name="api-task-reopen"),
    path("tasks/<key:key>/cancel/", api.TaskCancelApi.as_view(), name="api-task-cancel"),
    path("attempts/<id:attempt_id>/", api_attempts.AttemptDetailApi.as_view(), name="api-attempt"),
    path(
        "attempts/<id:attempt_id>/heartbeat/",
        api_attempts.AttemptHeartbeatApi.as_view(),
        name="api-attempt-heartbeat",
    ),
    path(
        "attempts/<id:attempt_id>/comments/",
        api_review.AttemptCommentsApi.as_view(),
        name="api-attempt-comments",
    ),
    path(
        "attempts/<id:attempt_id>/comments/<id:comment_id>/resolve/",
        api_review.CommentResolveApi.as_view(),
        name="api-attempt-comment-resolve",
    ),
    path(
        "attempts/<id:attempt_id>/checkpoint/",
        api_attempts.AttemptCheckpointApi.as_view(),
        name="api-attempt-checkpoint",
    ),
    path(
        "attempts/<id:attempt_id>/submit/",
        api_attempts.AttemptSubmitApi.as_view(),
        name="api-attempt-submit",
    ),
    path(
        "attempts/<id:attempt_id>/release/",
        api_attempts.AttemptReleaseApi.as_view(),
        name="api-attempt-release",
    ),
    path(
        "attempts/<id:attempt_id>/usage/void/",
        api_attempts.AttemptUsageVoidApi.as_view(),
        name="api-attempt-usage-void",
    ),
    path(
        "attempts/<id:attempt_id>/decisions/",
        api_attempts.AttemptDecisionCreateApi.as_view(),
        name="api-attempt-decisions",
    ),
    path(
        "attempts/<id:attempt_id>/evidence/",
        api_attempts.AttemptEvidenceApi.as_view(),
        name="api-attempt-evidence",
    ),
]

ui_patterns = [
    path("", views.home, name="home"),
    path("review/", views.review_queue, name="review-queue"),
    path("tasks/", views.task_board, name="task-board"),
    path("tasks/<key:key>/", views.task_detail, name="task-detail"),
    path("tasks/<key:key>/gates/", views.task_gates, name="task-gates"),
    path("tasks/<key:key>/review/", views.task_review, name="task-review"),
    path("tasks/<key:key>/comments/", views.task_comment, name="task-comment"),
    path(
        "tasks/<key:key>/comments/<id:comment_id>/resolve/",
        views.task_comment_resolve,
        name="task-comment-resolve",
    ),
    path("tasks/<key:key>/<str:action>/", views.task_action, name="task-action"),
]
