from django.urls import path

from tasks import api

api_patterns = [
    path("projects/", api.ProjectListApi.as_view(), name="api-projects"),
    path("projects/<str:slug>/", api.ProjectDetailApi.as_view(), name="api-project"),
    path("tasks/", api.TaskListCreateApi.as_view(), name="api-tasks"),
    path("tasks/claim/", api.TaskClaimApi.as_view(), name="api-task-claim"),
    path("tasks/<str:key>/", api.TaskDetailApi.as_view(), name="api-task"),
    path("tasks/<str:key>/context/", api.TaskContextApi.as_view(), name="api-task-context"),
    path("tasks/<str:key>/handoff/", api.TaskHandoffApi.as_view(), name="api-task-handoff"),
    path("tasks/<str:key>/events/", api.TaskEventsApi.as_view(), name="api-task-events"),
    path("tasks/<str:key>/review/", api.TaskReviewApi.as_view(), name="api-task-review"),
    path("tasks/<str:key>/publish/", api.TaskPublishApi.as_view(), name="api-task-publish"),
    path("tasks/<str:key>/unblock/", api.TaskUnblockApi.as_view(), name="api-task-unblock"),
    path("tasks/<str:key>/reopen/", api.TaskReopenApi.as_view(), name="api-task-reopen"),
    path("tasks/<str:key>/cancel/", api.TaskCancelApi.as_view(), name="api-task-cancel"),
    path("attempts/<int:attempt_id>/", api.AttemptDetailApi.as_view(), name="api-attempt"),
    path(
        "attempts/<int:attempt_id>/heartbeat/",
        api.AttemptHeartbeatApi.as_view(),
        name="api-attempt-heartbeat",
    ),
    path(
        "attempts/<int:attempt_id>/checkpoint/",
        api.AttemptCheckpointApi.as_view(),
        name="api-attempt-checkpoint",
    ),
    path(
        "attempts/<int:attempt_id>/submit/",
        api.AttemptSubmitApi.as_view(),
        name="api-attempt-submit",
    ),
    path(
        "attempts/<int:attempt_id>/release/",
        api.AttemptReleaseApi.as_view(),
        name="api-attempt-release",
    ),
]
