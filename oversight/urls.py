"""Addresses of the manager's view: the API's (api_patterns) and the pages' (ui_patterns).

Paths and names are the ones they had in ``tasks``: they are the contract.
"""

from django.urls import path

from oversight import api, views

api_patterns = [
    path("projects/<key:slug>/plan/", api.PlanApi.as_view(), name="api-plan"),
    path("projects/<key:slug>/costs/", api.ProjectCostsApi.as_view(), name="api-project-costs"),
]

ui_patterns = [
    path("dashboard/", views.dashboard, name="dashboard"),
    path("plan/", views.plan_index, name="plan-index"),
    path("projects/<key:slug>/plan/", views.plan, name="plan"),
]
