"""The probes: ``/healthz`` (the process serves) and ``/readyz`` (what it needs is reachable).

``/readyz`` checks the database, Celery's broker, the evidence store and, on a machine that
runs the runner (``FACTORY_RUNNER_HOST``), the sandbox; each check writes nothing and
gives up after a few seconds. It answers 200 when all are up, else 503 naming those that
are down. A reason is the kind of error only (``down (OperationalError)``), never its
message: that names hosts, users and paths, and anyone may call the probes. The message
goes to the log, one line per check that is down. ``factory_site.middleware.HealthMiddleware``
serves both.
"""

import logging

import redis
from django.conf import settings
from django.db import connections
from django.db.utils import load_backend
from django.http import JsonResponse
from redis.backoff import NoBackoff
from redis.retry import Retry

from evidence.storage import storage_check
from factory_site.celery import app as celery_app
from runner.sandbox import sandbox

log = logging.getLogger(__name__)

TIMEOUT = 3  # seconds each check may wait for an answer


def healthz(request) -> JsonResponse:
    """The process answers: no database, nothing else asked."""
    return JsonResponse({"status": "ok"})


def readyz(request) -> JsonResponse:
    """Every active check, in order; 503 naming each that raised."""
    checks, down = {}, []
    for name, check in active_checks().items():
        try:
            checks[name] = check()
        except Exception as exc:
            # One line, no traceback: a load balancer asks every few seconds all outage long.
            log.warning("readyz: %s is down: %s: %s", name, type(exc).__name__, exc)
            checks[name] = f"down ({type(exc).__name__})"
            down.append(name)
    if down:
        response = JsonResponse({"status": "down", "down": down, "checks": checks}, status=503)
        # Django would log each 503 again as an error ("Service Unavailable"): the line
        # above says more, once.
        response._has_been_logged = True
        return response
    return JsonResponse({"status": "ok", "checks": checks})


def active_checks() -> dict:
    checks = {"database": database, "broker": broker, "storage": storage}
    if settings.FACTORY_RUNNER_HOST:
        checks["sandbox"] = sandbox_ready
    return checks


def database() -> str:
    """``SELECT 1`` on a connection of its own, opened with a short timeout (PostgreSQL):
    the request's connection could hang for minutes on a host that does not answer."""
    settings_dict = connections["default"].settings_dict
    options = {**settings_dict.get("OPTIONS", {})}
    options.pop("pool", None)  # one connection, not a pool of its own
    postgres = settings_dict["ENGINE"].endswith("postgresql")
    if postgres:
        options["connect_timeout"] = TIMEOUT
    wrapper = load_backend(settings_dict["ENGINE"]).DatabaseWrapper(
        {**settings_dict, "OPTIONS": options}, "default"
    )
    try:
        if postgres:
            wrapper.set_autocommit(False)  # one transaction, for SET LOCAL
        with wrapper.cursor() as cursor:
            if postgres:
                # LOCAL: this transaction's only. Behind a pooler in transaction mode a
                # plain SET would stay on the server connection for whoever gets it next.
                cursor.execute(f"SET LOCAL statement_timeout = {TIMEOUT * 1000}")
            cursor.execute("SELECT 1")
            cursor.fetchone()
        if postgres:
            wrapper.rollback()
    finally:
        wrapper.close()
    return "ok"


def broker() -> str:
    """Connect to Celery's broker and ping it (Redis); "eager" when jobs run in-process."""
    conf = celery_app.conf
    if conf.task_always_eager:
        return "eager"
    url = conf.broker_url
    if url.startswith(("redis://", "rediss://", "unix://")):
        client = redis.Redis.from_url(
            url, socket_connect_timeout=TIMEOUT, socket_timeout=TIMEOUT, retry=Retry(NoBackoff(), 0)
        )
        try:
            client.ping()
        finally:
            client.close()
    else:
        with celery_app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1, timeout=TIMEOUT)
    return "ok"


def storage() -> str:
    storage_check()
    return "ok"


def sandbox_ready() -> str:
    sandbox().check()
    return "ok"
