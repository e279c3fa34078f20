"""Celery wiring. Jobs live in each app's ``jobs.py``."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "factory_site.settings")

app = Celery("factory_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(related_name="jobs")
