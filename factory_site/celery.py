"""Celery wiring. Jobs live in each app's ``jobs.py``.

A job runs as part of the request (or job) that started it: the request id travels in
the job's message headers and is bound while the job runs, so its log lines carry it
and the jobs it starts carry it on. Workers log through the site's ``LOGGING``.
"""

import logging.config
import os

from celery import Celery, signals
from django.conf import settings

from projects import logs

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "factory_site.settings")

app = Celery("factory_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(related_name="jobs")

HEADER = "factory_request_id"  # not a name of Celery's own request fields
_bound: dict[str, object] = {}  # job id → what to restore when it ends


@signals.before_task_publish.connect
def _send_the_request_id(headers=None, **kwargs):
    started_by = logs.request_id()
    if headers is not None and started_by is not None:
        headers.setdefault(HEADER, started_by)


@signals.task_prerun.connect
def _bind_the_request_id(task_id=None, task=None, **kwargs):
    # A worker's request lists the message's own headers under ``headers``, and so does
    # an eager job given ``headers=``.
    sent = (task.request.headers or {}).get(HEADER)
    # From the message; else the id already bound (an eager job runs in its starter's
    # context); else a new one, so a job beat started can be followed into its own jobs.
    value = sent if logs.sane(sent) else (logs.request_id() or logs.new_request_id())
    _bound[task_id] = logs.bind(value)


@signals.task_postrun.connect
def _unbind_the_request_id(task_id=None, **kwargs):
    token = _bound.pop(task_id, None)
    if token is not None:
        logs.unbind(token)


@signals.setup_logging.connect
def _log_as_the_site_does(loglevel=None, **kwargs):
    # Connected, this replaces Celery's own set-up: a worker writes the same lines (JSON in
    # production, with request ids) as the web processes. The command line's level holds.
    logging.config.dictConfig(settings.LOGGING)
    if loglevel:
        logging.getLogger().setLevel(loglevel)
