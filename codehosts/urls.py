"""Addresses the code hosts call: their webhooks."""

from django.urls import path

from codehosts import views

hook_patterns = [
    path("hooks/github/", views.github, name="hooks-github"),
]
