"""Settings for Factory Memory, read from environment variables.

Every default works on a fresh machine with no external service (SQLite, eager
Celery, files on local disk). The production profile switches on PostgreSQL and
Redis with ``DATABASE_URL`` and ``CELERY_BROKER_URL``; see docs/deploy.md.
"""

import os
import re
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from projects.claims import parse_role_map

BASE_DIR = Path(__file__).resolve().parent.parent


def env(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in env(name, default).split(",") if item.strip()]


DEBUG = env_bool("DEBUG", False)
# Only a developer's machine (DEBUG=1, as `make run` sets) has a built-in key: with DEBUG
# off a key anyone can read would let anyone forge a session cookie, so there is none.
SECRET_KEY = env("SECRET_KEY") or ("insecure-development-key-change-me" if DEBUG else "")
if not SECRET_KEY:
    raise ImproperlyConfigured(
        "SECRET_KEY is not set, and with DEBUG off there is no built-in key. Generate one with\n"
        "    python3 -c 'import secrets; print(secrets.token_urlsafe(50))'\n"
        "and set SECRET_KEY to it, the same in every process of the site (web, worker, beat). "
        "On a developer's machine, DEBUG=1 uses a built-in key instead. See docs/deploy.md."
    )
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")
SITE_URL = env("SITE_URL", "http://127.0.0.1:8000")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "knox",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    # The layers, lowest first: each of these apps imports only the ones listed before it
    # (tests/test_layers.py keeps it so; docs/architecture.md says why).
    "projects",
    "decisions",
    "evidence",
    "runner",
    "tasks",
    "landing",
    "oversight",
    "interop",
    "codehosts",
    "events",
    "demo",
]

MIDDLEWARE = [
    "factory_site.middleware.RequestIdMiddleware",  # first: every other one's log lines carry it
    "django.middleware.security.SecurityMiddleware",
    # /healthz and /readyz, before the Host header, the session or the user is read.
    "factory_site.middleware.HealthMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # After whitenoise, so static files are not counted; before the rest, so it times them.
    "factory_site.metrics.RequestMetricsMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "factory_site.middleware.SecurityHeadersMiddleware",
    "factory_site.middleware.DatabaseUnavailableMiddleware",
]

ROOT_URLCONF = "factory_site.urls"
WSGI_APPLICATION = "factory_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "projects.pages.navigation",
            ],
        },
    },
]

# --- Database -----------------------------------------------------------------
# "transaction" behind a pooler in transaction mode (PgBouncer's pool_mode = transaction),
# where nothing may outlive a transaction: no prepared statements, no server-side cursors,
# and the live stream polls instead of LISTEN (docs/deploy.md, "Behind PgBouncer").
DATABASE_POOL_MODE = env("DATABASE_POOL_MODE", "session")
if DATABASE_POOL_MODE not in ("session", "transaction"):
    raise ImproperlyConfigured("DATABASE_POOL_MODE must be session or transaction")
DATABASES = {
    "default": dj_database_url.parse(
        env("DATABASE_URL", f"sqlite:///{BASE_DIR / 'db.sqlite3'}"),
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 0),
        conn_health_checks=True,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # IMMEDIATE makes every atomic block take SQLite's write lock up front, so two
    # writers queue instead of failing with "database is locked" halfway through.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"transaction_mode": "IMMEDIATE", "timeout": 20}
    )
else:
    # Django's cursors bind parameters on the client and never prepare; this lets the
    # one cursor that binds on the server (the claim statement, tasks.claim_sql) keep
    # its plan per connection. Off with DATABASE_PREPARE=0, and behind a pooler in
    # transaction mode, where the next transaction may run on another server connection.
    _prepare = env("DATABASE_PREPARE", "1") != "0" and DATABASE_POOL_MODE != "transaction"
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"prepare_threshold": 5 if _prepare else None}
    )
    # A server-side cursor (QuerySet.iterator()) is fetched from over several transactions
    # in autocommit, on the one server connection that has it: not behind such a pooler.
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = DATABASE_POOL_MODE == "transaction"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# --- Files ----------------------------------------------------------------------
STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(env("STATIC_ROOT", str(BASE_DIR / "var" / "static")))
MEDIA_ROOT = Path(env("MEDIA_ROOT", str(BASE_DIR / "var" / "media")))
MEDIA_URL = "/media/"
# Evidence lives in STORAGES["default"]: files under MEDIA_ROOT, or any S3-compatible bucket
# (FACTORY_EVIDENCE_STORAGE=s3). Either store writes a file once and never deletes it
# (evidence/backends.py, ADR 0017). FILE_STORAGE_BACKEND names another class instead.
FACTORY_EVIDENCE_STORAGE = env("FACTORY_EVIDENCE_STORAGE", "filesystem")
if FACTORY_EVIDENCE_STORAGE == "filesystem":
    EVIDENCE_STORAGE = {
        "BACKEND": env("FILE_STORAGE_BACKEND", "evidence.backends.EvidenceFileSystemStorage")
    }
elif FACTORY_EVIDENCE_STORAGE == "s3":
    if not env("FACTORY_S3_BUCKET"):
        raise ImproperlyConfigured(
            "FACTORY_EVIDENCE_STORAGE=s3 needs FACTORY_S3_BUCKET (and FACTORY_S3_ENDPOINT_URL "
            "for a store other than AWS). See docs/deploy.md, 'Evidence on object storage'."
        )
    _endpoint = env("FACTORY_S3_ENDPOINT_URL") or None
    EVIDENCE_STORAGE = {
        "BACKEND": "evidence.backends.EvidenceS3Storage",
        "OPTIONS": {
            "bucket_name": env("FACTORY_S3_BUCKET"),
            "endpoint_url": _endpoint,
            "region_name": env("FACTORY_S3_REGION") or None,
            # MinIO and most other stores behind one host name want path-style addresses.
            "addressing_style": env("FACTORY_S3_ADDRESSING_STYLE")
            or ("path" if _endpoint else None),
            "location": env("FACTORY_S3_PREFIX").strip("/"),
            "file_overwrite": False,
            "default_acl": None,  # the bucket's own policy: private
            # Unset keys fall back to AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, then to boto3's
            # own chain (instance profile, web identity).
            **(
                {"access_key": env("FACTORY_S3_ACCESS_KEY")} if env("FACTORY_S3_ACCESS_KEY") else {}
            ),
            **(
                {"secret_key": env("FACTORY_S3_SECRET_KEY")} if env("FACTORY_S3_SECRET_KEY") else {}
            ),
        },
    }
else:
    raise ImproperlyConfigured(
        f"FACTORY_EVIDENCE_STORAGE={FACTORY_EVIDENCE_STORAGE!r}: choose filesystem or s3"
    )
STORAGES = {
    "default": EVIDENCE_STORAGE,
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
FILE_UPLOAD_TEMP_DIR = env("FILE_UPLOAD_TEMP_DIR") or None
# Evidence uploads stream to temporary files here; on the same disk as MEDIA_ROOT they are
# moved into the store, not copied. Created on first use.
FACTORY_UPLOAD_TEMP_DIR = env("FACTORY_UPLOAD_TEMP_DIR", str(BASE_DIR / "var" / "uploads"))

# --- Cache (API rate limits) ---------------------------------------------------------
# Several web processes must share their counts in Redis (CACHE_URL=redis://…): counted in
# each process's memory, a client would get the limit once per process. Memory is kept only
# where it is exact: a developer's machine (DEBUG=1) or a site that says it runs one process.
if not (env("CACHE_URL") or DEBUG or env_bool("FACTORY_SINGLE_PROCESS")):
    raise ImproperlyConfigured(
        "CACHE_URL is not set: API rate limits would be counted in each process's memory, and "
        "with several web processes (gunicorn --workers 4) each would allow the full limit. "
        "Set CACHE_URL=redis://127.0.0.1:6379/1 (any Redis every process of the site reaches), "
        "or FACTORY_SINGLE_PROCESS=1 if exactly one process serves the site. "
        "See docs/deploy.md."
    )
CACHES = {
    "default": (
        {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": env("CACHE_URL")}
        if env("CACHE_URL")
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}

# --- Celery ---------------------------------------------------------------------
CELERY_BROKER_URL = env("CELERY_BROKER_URL")
# Without a broker, jobs run in-process right after commit (the embedded default).
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", not CELERY_BROKER_URL)
CELERY_TASK_EAGER_PROPAGATES = True
if not CELERY_BROKER_URL:
    CELERY_BROKER_URL = "memory://localhost/"
CELERY_TASK_ACKS_LATE = True
# Sites sharing one Redis keep apart by queue name.
CELERY_TASK_DEFAULT_QUEUE = env("CELERY_QUEUE", "factory")
# Redis re-delivers an unacknowledged job after this long; longer than any job may run,
# the runner and the lander included (FACTORY_RUNNER_TIME_LIMIT, FACTORY_LANDING_TIME_LIMIT
# below), or a job still at work would be handed to a second worker.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env_int(
        "CELERY_VISIBILITY_TIMEOUT",
        600
        + max(
            3000,
            env_int("FACTORY_RUNNER_TIME_LIMIT", 2 * 3600),
            env_int("FACTORY_LANDING_TIME_LIMIT", 6 * 3600),
        ),
    ),
}
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# The runner's job has a queue of its own, so runners can live on other machines.
CELERY_TASK_ROUTES = {
    "runner.jobs.verify_job": {"queue": "verify"},
    # The lander verifies merged trees in the same sandbox, so it runs on runner machines,
    # but on a queue of its own: a submission's verification never waits behind a lander.
    "landing.jobs.land_job": {"queue": "land"},
}
# Webhook tries share the gates' workers unless given a queue (and workers) of their own:
# a slow receiver then cannot hold a gate up (docs/deploy.md).
if env("FACTORY_WEBHOOK_QUEUE"):
    CELERY_TASK_ROUTES["events.jobs.deliver_job"] = {"queue": env("FACTORY_WEBHOOK_QUEUE")}
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BEAT_SCHEDULE = {
    "reconcile": {
        "task": "tasks.jobs.reconcile_job",
        "schedule": env_int("FACTORY_RECONCILE_SECONDS", 30),
    },
    # Expired tokens and dead runners' workspaces: nothing waits on them, so less often.
    "housekeeping": {
        "task": "tasks.jobs.housekeeping_job",
        "schedule": env_int("FACTORY_HOUSEKEEPING_SECONDS", 300),
    },
    # Webhook retries that are due, and tries whose worker died or whose message was lost.
    "webhooks": {
        "task": "events.jobs.deliveries_due_job",
        "schedule": env_int("FACTORY_WEBHOOK_SWEEP_SECONDS", 10),
    },
    # Code hosts: what webhooks missed (tasks the host does not show yet, deliveries whose
    # processing failed), a bounded number per tick, and kept deliveries past their retention.
    "code-hosts": {
        "task": "codehosts.jobs.hosts_sweep_job",
        "schedule": env_int("FACTORY_RECONCILE_SECONDS", 30),
    },
    # Checked imports nobody applied within FACTORY_IMPORT_KEEP_DAYS let their uploads go.
    "imports": {
        "task": "interop.jobs.imports_expire_job",
        "schedule": env_int("FACTORY_IMPORT_SWEEP_SECONDS", 3600),
    },
}

# --- REST API -------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "projects.auth.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    # Authorize, then validate: every write view's `writers` is checked before its body
    # is read (projects.access, ADR 0025).
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.IsAuthenticated",
        "projects.access.WritersFirst",
    ],
    "DEFAULT_PARSER_CLASSES": ["projects.parsers.JSONParser"],
    "DEFAULT_SCHEMA_CLASS": "projects.rest.FactoryAutoSchema",
    "EXCEPTION_HANDLER": "projects.rest.exception_handler",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    # Per user (or per address for anonymous callers); counted in CACHES["default"].
    # Addresses come from projects.throttles.client_address (FACTORY_TRUSTED_PROXIES).
    "DEFAULT_THROTTLE_CLASSES": [
        "projects.throttles.AnonThrottle",
        "projects.throttles.UserThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "anon": env("FACTORY_RATE_ANON", "120/min"),
        "user": env("FACTORY_RATE_USER", "6000/min"),
        # Refused bearer tokens per address, API and MCP alike (ADR 0006).
        "auth_failure": env("FACTORY_RATE_AUTH_FAILURES", "20/min"),
    },
}
# JSON and form bodies are read into memory up to this size (413 beyond); evidence
# files stream to disk and have their own limit, FACTORY_MAX_UPLOAD_BYTES.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("FACTORY_MAX_BODY_BYTES", 1024 * 1024)
DATA_UPLOAD_MAX_NUMBER_FIELDS = 1000
REST_KNOX = {
    "AUTH_HEADER_PREFIX": "Bearer",
    "TOKEN_PREFIX": "fm_",
    "TOKEN_TTL": timedelta(days=env_int("FACTORY_TOKEN_TTL_DAYS", 90)),
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Factory Memory API",
    "DESCRIPTION": "The agent contract: claim, context, evidence, submit, review.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI from this site's own static files: the docs page calls no other host.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "TaskStateEnum": "tasks.models.TaskState",
        "AttemptStateEnum": "tasks.models.AttemptState",
        "SpecVersionStateEnum": "decisions.models.SpecVersionState",
        "DecisionStateEnum": "decisions.models.DecisionState",
        "EvidenceKindEnum": "evidence.models.Kind",
        "ProvenanceEnum": "evidence.models.Provenance",
        "ImportFormatEnum": ["speckit", "openspec", "madr", "beads"],
        "WebhookFormatEnum": ["standard-webhooks", "commit-status"],
    },
}

# --- Factory Memory -------------------------------------------------------------
FACTORY_LEASE_SECONDS_DEFAULT = env_int("FACTORY_LEASE_SECONDS_DEFAULT", 300)
FACTORY_LEASE_SECONDS_MIN = env_int("FACTORY_LEASE_SECONDS_MIN", 1)
FACTORY_LEASE_SECONDS_MAX = env_int("FACTORY_LEASE_SECONDS_MAX", 3600)
FACTORY_MAX_ATTEMPTS_DEFAULT = env_int("FACTORY_MAX_ATTEMPTS_DEFAULT", 3)
FACTORY_MAX_UPLOAD_BYTES = env_int("FACTORY_MAX_UPLOAD_BYTES", 2 * 1024**3)
# JUnit, Cobertura and diffs are parsed as they stream, in bounded memory, up to the upload
# limit. JSON and link files are still parsed whole, up to this size (a JSON document takes
# about five times its size once loaded).
FACTORY_MAX_PARSED_BYTES = env_int("FACTORY_MAX_PARSED_BYTES", 8 * 1024**2)
# Pages render a file inline (image, log tail, diff head, JUnit table) up to this size;
# past it they link to the download instead.
FACTORY_INLINE_MAX_BYTES = env_int("FACTORY_INLINE_MAX_BYTES", 20 * 1024**2)
# Evidence quotas (413 quota_exceeded), per attempt and per project, each counted over the
# uploader's provenance only (an agent's files never use up a verifier's room); gate
# reports are not counted. Every attached file counts its full size, even when the same
# bytes are stored once. 0 switches a quota off.
FACTORY_QUOTA_ATTEMPT_BYTES = env_int("FACTORY_QUOTA_ATTEMPT_BYTES", 4 * 1024**3)
FACTORY_QUOTA_ATTEMPT_FILES = env_int("FACTORY_QUOTA_ATTEMPT_FILES", 500)
FACTORY_QUOTA_PROJECT_BYTES = env_int("FACTORY_QUOTA_PROJECT_BYTES", 200 * 1024**3)
FACTORY_QUOTA_PROJECT_FILES = env_int("FACTORY_QUOTA_PROJECT_FILES", 200_000)
# The most one usage report (a heartbeat's or a submit's increment) may say it cost, in
# whole US dollars; a report above it is refused (400) and changes nothing, so one report
# cannot use up a project's month (ADR 0021). The API's schema states it, so it is read once.
_usage_max_report = env("FACTORY_USAGE_MAX_REPORT_USD", "100").strip()
if not re.fullmatch(r"[0-9]{1,6}", _usage_max_report) or int(_usage_max_report) < 1:
    raise ImproperlyConfigured(
        f"FACTORY_USAGE_MAX_REPORT_USD={_usage_max_report!r}: the most one usage report may "
        "cost must be a whole number of US dollars from 1 to 999999 (default 100). "
        "See docs/deploy.md."
    )
FACTORY_USAGE_MAX_REPORT_USD = int(_usage_max_report)

# Gates by name (a project's gate_policy picks which run). More can be added without
# editing this file: FACTORY_EXTRA_GATES="name=dotted.path.Class,other=...".
FACTORY_GATES = {
    "required-evidence": "evidence.gates.RequiredEvidence",
    "tests-pass": "evidence.gates.TestsPass",
    "coverage": "evidence.gates.CoverageGate",
    "diff-scope": "evidence.gates.DiffScope",
    "spec-current": "evidence.gates.SpecCurrent",
    "authoritative-tests": "evidence.gates.AuthoritativeTests",
    "runner": "runner.gates.RunnerGate",
}
FACTORY_EXTRA_GATES = dict(item.split("=", 1) for item in env_list("FACTORY_EXTRA_GATES"))
# A gate is stopped after this long (soft limit, then hard limit 30 s later) and counts as
# failed; the reconciler re-queues a run that has been running longer than limit + grace.
FACTORY_GATE_TIME_LIMIT = env_int("FACTORY_GATE_TIME_LIMIT", 120)
FACTORY_GATE_GRACE_SECONDS = env_int("FACTORY_GATE_GRACE_SECONDS", 60)
FACTORY_GATE_MAX_TRIES = env_int("FACTORY_GATE_MAX_TRIES", 3)
# A queued run whose job has not started after this long is dispatched again (lost message).
FACTORY_GATE_REQUEUE_AFTER = env_int("FACTORY_GATE_REQUEUE_AFTER", 60)

# The runner (docs/runner.md): mirrors and workspaces live under FACTORY_RUNNER_ROOT on the
# machine that takes the Celery queue "verify". A project's verify block picks its limits
# within the bounds below; the sandbox is bubblewrap, run as FACTORY_RUNNER_UID when the
# worker is root.
FACTORY_RUNNER_ROOT = Path(env("FACTORY_RUNNER_ROOT", str(BASE_DIR / "var" / "runner")))
FACTORY_RUNNER_SANDBOX = env("FACTORY_RUNNER_SANDBOX", "runner.sandbox.Bubblewrap")
FACTORY_RUNNER_UID = env_int("FACTORY_RUNNER_UID", 65534)
FACTORY_RUNNER_MAX_SECONDS = env_int("FACTORY_RUNNER_MAX_SECONDS", 3600)
FACTORY_RUNNER_MAX_MEMORY_MB = env_int("FACTORY_RUNNER_MAX_MEMORY_MB", 16384)
FACTORY_RUNNER_MAX_OUTPUT_BYTES = env_int("FACTORY_RUNNER_MAX_OUTPUT_BYTES", 64 * 1024 * 1024)
FACTORY_RUNNER_PROCESSES = env_int("FACTORY_RUNNER_PROCESSES", 256)
FACTORY_RUNNER_FILE_SIZE_MB = env_int("FACTORY_RUNNER_FILE_SIZE_MB", 1024)
FACTORY_RUNNER_REPORT_MAX_BYTES = env_int("FACTORY_RUNNER_REPORT_MAX_BYTES", 64 * 1024 * 1024)
# Where a project's repository may be. A local one (file:///… or a path) only under these
# roots, besides FACTORY_RUNNER_ROOT/repositories (the site's own, the demo's); none by
# default, so a manager cannot point the runner at the server's disk. A network one only
# at public addresses unless private ones are allowed (a code host on the site's own
# network). projects.verify.check_repository_location applies both, at save and fetch.
FACTORY_LOCAL_REPOSITORY_ROOTS = env_list("FACTORY_LOCAL_REPOSITORY_ROOTS")
FACTORY_REPOSITORY_ALLOW_PRIVATE = env_bool("FACTORY_REPOSITORY_ALLOW_PRIVATE", DEBUG)
# The largest tree the runner checks out (every file's size summed, before the checkout);
# a commit over it fails the runner's gate, saying so.
FACTORY_RUNNER_MAX_CHECKOUT_BYTES = env_int(
    "FACTORY_RUNNER_MAX_CHECKOUT_BYTES", 2 * 1024 * 1024 * 1024
)
# Extra directories the sandbox sees read-only (a shared toolchain: /opt/venvs/ci).
FACTORY_RUNNER_RO_BINDS = env_list("FACTORY_RUNNER_RO_BINDS")
# Dependency caches of the setup step (docs/runner.md, "Caching dependencies"): one folder
# per project and lock-file key under this root (FACTORY_RUNNER_ROOT/cache when empty);
# the newest FACTORY_RUNNER_CACHE_KEEP keys of a project are kept, and a key's folder
# that setup grows past FACTORY_RUNNER_CACHE_MAX_MB is dropped after its verification.
FACTORY_RUNNER_CACHE_ROOT = env("FACTORY_RUNNER_CACHE_ROOT", "")
FACTORY_RUNNER_CACHE_KEEP = env_int("FACTORY_RUNNER_CACHE_KEEP", 3)
FACTORY_RUNNER_CACHE_MAX_MB = env_int("FACTORY_RUNNER_CACHE_MAX_MB", 4096)
# This machine runs the runner's jobs (a worker of the queue "verify", or Celery eager in
# the web process): /readyz then checks that the sandbox can run here.
FACTORY_RUNNER_HOST = env_bool("FACTORY_RUNNER_HOST", False)
# A verification's whole job (fetch, setup, test, collect) stops after this long; the
# reconciler re-queues a runner that has run longer than this plus the grace period.
FACTORY_RUNNER_TIME_LIMIT = env_int("FACTORY_RUNNER_TIME_LIMIT", 2 * 3600)
# Landing (the merge queue, docs/landing.md): who the landed commits are made by; how
# often a batch is built again when someone else moved the target between build and
# push; and how long one lander's job may run (every batch waiting in the queue).
FACTORY_LANDING_COMMITTER = (
    env("FACTORY_LANDING_COMMITTER_NAME", "Factory Memory"),
    env("FACTORY_LANDING_COMMITTER_EMAIL", "factory-memory@localhost"),
)
FACTORY_LANDING_PUSH_TRIES = env_int("FACTORY_LANDING_PUSH_TRIES", 3)
# A change first in the queue whose batches ended this many times in a row without a verdict
# (an error, or a lander that died) goes back, if the target alone verifies cleanly.
FACTORY_LANDING_HEAD_ERRORS = env_int("FACTORY_LANDING_HEAD_ERRORS", 3)
# How many verify runs one lander may run at once: above 1, the prefixes a bisection may
# need next are verified beside the one it needs now, while no submission waits.
FACTORY_LANDING_VERIFY_PARALLEL = env_int("FACTORY_LANDING_VERIFY_PARALLEL", 1)
FACTORY_LANDING_TIME_LIMIT = env_int("FACTORY_LANDING_TIME_LIMIT", 6 * 3600)
# After a batch errs, the lander looks at the target again after this long, twice as late
# each time nothing changed, up to the most (ADR 0020); a manager may wake it sooner.
FACTORY_LANDING_BACKOFF_SECONDS = env_int("FACTORY_LANDING_BACKOFF_SECONDS", 30)
FACTORY_LANDING_BACKOFF_MAX_SECONDS = env_int("FACTORY_LANDING_BACKOFF_MAX_SECONDS", 600)
# Landing through a pull request (ADR 0041): how long the lander waits for the target's
# required checks (the team's CI) on the verified commit before the change goes back, and
# how often it looks meanwhile.
FACTORY_LANDING_CHECKS_TIMEOUT = env_int("FACTORY_LANDING_CHECKS_TIMEOUT", 30 * 60)
FACTORY_LANDING_CHECKS_POLL_SECONDS = env_int("FACTORY_LANDING_CHECKS_POLL_SECONDS", 15)
# The first look again after the lander's own checks; each next one twice as far, up to the
# poll interval above.
FACTORY_LANDING_CHECKS_FIRST_LOOK_SECONDS = env_int("FACTORY_LANDING_CHECKS_FIRST_LOOK_SECONDS", 1)
# Between two looks the lander listens, every this many milliseconds, for the host's news of
# a check or status on the commit (a webhook delivery kept: check_run, check_suite, status),
# and looks at once when there is some; 0 turns listening off.
FACTORY_LANDING_CHECKS_LISTEN_MS = env_int("FACTORY_LANDING_CHECKS_LISTEN_MS", 250)
# Code hosts (docs/code-hosts.md): the API bases a project's code_host may name (GitHub
# Enterprise Server by adding its https://HOST/api/v3), and the largest webhook delivery
# taken (GitHub sends at most 25 MB).
FACTORY_CODE_HOST_URLS = env_list("FACTORY_CODE_HOST_URLS", "https://api.github.com")
FACTORY_CODE_HOST_HOOK_MAX_BYTES = env_int("FACTORY_CODE_HOST_HOOK_MAX_BYTES", 25 * 1024**2)
# Calling the host (codehosts.providers): a call's time limit, retries of a read that met
# a 5xx or a timeout (backoff doubling from BACKOFF), and the longest rate-limit wait the
# provider sits out itself; a longer one is the caller's RateLimited, to reschedule.
FACTORY_CODE_HOST_TIMEOUT_SECONDS = env_int("FACTORY_CODE_HOST_TIMEOUT_SECONDS", 10)
FACTORY_CODE_HOST_RETRIES = env_int("FACTORY_CODE_HOST_RETRIES", 3)
FACTORY_CODE_HOST_MAX_WAIT_SECONDS = env_int("FACTORY_CODE_HOST_MAX_WAIT_SECONDS", 60)
FACTORY_CODE_HOST_BACKOFF_SECONDS = env_int("FACTORY_CODE_HOST_BACKOFF_SECONDS", 1)
# A manager saving a code host: the site reaches the host and names each missing
# permission (docs/code-hosts.md). Off only where no host can be reached.
FACTORY_CODE_HOST_CHECK_AT_SAVE = env_bool("FACTORY_CODE_HOST_CHECK_AT_SAVE", True)
# Jobs calling the host (codehosts.jobs): tries after the first when it is down or rate
# limiting (back-off doubling from BACKOFF); then the sweep comes back to it. The sweep
# syncs at most RECONCILE_MAX tasks and retries as many deliveries per tick; a kept
# delivery is deleted after DELIVERY_KEEP_DAYS.
FACTORY_CODE_HOST_JOB_RETRIES = env_int("FACTORY_CODE_HOST_JOB_RETRIES", 5)
FACTORY_CODE_HOST_RECONCILE_MAX = env_int("FACTORY_CODE_HOST_RECONCILE_MAX", 20)
FACTORY_CODE_HOST_DELIVERY_KEEP_DAYS = env_int("FACTORY_CODE_HOST_DELIVERY_KEEP_DAYS", 14)
# Who is who (codehosts.identities, ADR 0040): the single sign-on issuer whose subject is the
# code host's numeric user id (a GitHub sign-in's). Set, a host account is the member signed
# in with that identity; empty, only a manager's link says whose a host account is.
FACTORY_CODE_HOST_SSO_ISSUER = env("FACTORY_CODE_HOST_SSO_ISSUER")
# Imports (interop): the upload, what it may expand to, and how many files it may hold.
FACTORY_IMPORT_MAX_BYTES = env_int("FACTORY_IMPORT_MAX_BYTES", 20 * 1024**2)
FACTORY_IMPORT_MAX_EXPANDED_BYTES = env_int("FACTORY_IMPORT_MAX_EXPANDED_BYTES", 100 * 1024**2)
FACTORY_IMPORT_MAX_FILES = env_int("FACTORY_IMPORT_MAX_FILES", 20_000)
# What one imported record keeps beside its fields (front matter, sections, keys without a
# home), as JSON; a record past it is skipped and the report says so.
FACTORY_IMPORT_MAX_METADATA_BYTES = env_int("FACTORY_IMPORT_MAX_METADATA_BYTES", 1024**2)
# A checked import (a dry run) keeps its upload this long for a manager to apply; then it
# expires (interop.jobs.imports_expire_job) and applying it is refused (409 import_expired).
FACTORY_IMPORT_KEEP_DAYS = env_int("FACTORY_IMPORT_KEEP_DAYS", 7)
# A reviewer's comment on diff lines (tasks.comments.comment_add) is at most this long.
FACTORY_COMMENT_MAX_CHARS = env_int("FACTORY_COMMENT_MAX_CHARS", 10_000)

# Jobs of these queues run in a thread of their own when Celery is eager (the embedded
# default), so a submit or an approval answers at once while the runner or lander works.
FACTORY_EAGER_BACKGROUND_QUEUES = env_list(
    "FACTORY_EAGER_BACKGROUND_QUEUES",
    "verify,land,events.jobs.deliver_job,"
    # A code host's answer is not waited for by the request that changed the task.
    "codehosts.jobs.pull_request_sync_job,codehosts.jobs.delivery_process_job,"
    "codehosts.jobs.line_comment_post_job",
)

# Webhooks (docs/api.md "Events out"). A try waits FACTORY_WEBHOOK_TIMEOUT seconds for an
# answer; failed tries are retried after these delays (seconds, ±20 % jitter: about a day
# in all), then the delivery is failed; a subscription with no success for
# FACTORY_WEBHOOK_DISABLE_AFTER seconds is turned off. Targets inside the network
# (loopback, private, link-local) are refused unless allowed: a developer's site allows them.
FACTORY_WEBHOOK_TIMEOUT = float(env("FACTORY_WEBHOOK_TIMEOUT", "10"))
FACTORY_WEBHOOK_RETRY_SCHEDULE = [
    float(x)
    for x in env_list(
        "FACTORY_WEBHOOK_RETRY_SCHEDULE", "5,30,120,600,1800,3600,7200,14400,28800,28800"
    )
]
FACTORY_WEBHOOK_DISABLE_AFTER = env_int("FACTORY_WEBHOOK_DISABLE_AFTER", 24 * 3600)
FACTORY_WEBHOOK_ALLOW_PRIVATE = env_bool("FACTORY_WEBHOOK_ALLOW_PRIVATE", DEBUG)
FACTORY_WEBHOOK_MAX_PER_PROJECT = env_int("FACTORY_WEBHOOK_MAX_PER_PROJECT", 20)
FACTORY_WEBHOOK_LOG_DAYS = env_int("FACTORY_WEBHOOK_LOG_DAYS", 30)  # delivered/failed kept
# A try the sweep (or a commit) has sent is not sent again for this long unless it ran.
FACTORY_WEBHOOK_REQUEUE_AFTER = env_int("FACTORY_WEBHOOK_REQUEUE_AFTER", 60)
# The live stream (GET /api/v1/events/stream): a comment every FACTORY_STREAM_HEARTBEAT
# seconds keeps proxies from closing it; a client this many events behind is dropped.
FACTORY_STREAM_HEARTBEAT = float(env("FACTORY_STREAM_HEARTBEAT", "15"))
FACTORY_STREAM_BACKLOG = env_int("FACTORY_STREAM_BACKLOG", 1000)
# Open streams a user may hold at once, per web process (past it: 429 too_many_streams).
FACTORY_STREAM_MAX_PER_USER = env_int("FACTORY_STREAM_MAX_PER_USER", 5)
# Set when a WSGI site's proxy sends /api/v1/events/stream to an ASGI process, so that
# pages served by WSGI update live too (a site served through ASGI always does).
FACTORY_STREAM_ROUTED = env_bool("FACTORY_STREAM_ROUTED", False)

# Prometheus scrapes /metrics with `Authorization: Bearer <this>`; unset, /metrics is a 404.
# PROMETHEUS_MULTIPROC_DIR (read by prometheus_client itself) adds up the processes'
# figures (docs/operations.md).
FACTORY_METRICS_TOKEN = env("FACTORY_METRICS_TOKEN")

# Log lines: one JSON object per line in production, readable text on a developer's machine;
# each carries the request id of the request or job that wrote it (docs/operations.md).
FACTORY_LOG_FORMAT = env("FACTORY_LOG_FORMAT", "text" if DEBUG else "json")
if FACTORY_LOG_FORMAT not in {"json", "text"}:
    raise ImproperlyConfigured("FACTORY_LOG_FORMAT must be json or text")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "projects.logs.RequestIdFilter"}},
    "formatters": {
        "json": {"()": "projects.logs.JsonFormatter"},
        "text": {"()": "projects.logs.TextFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "filters": ["request_id"],
            "formatter": FACTORY_LOG_FORMAT,
        }
    },
    "root": {"handlers": ["console"], "level": env("LOG_LEVEL", "INFO")},
    # One line per finished job is noise in the embedded default, where jobs run inline.
    "loggers": {"celery.app.trace": {"level": env("CELERY_TRACE_LOG_LEVEL", "WARNING")}},
}

X_FRAME_OPTIONS = "DENY"
# A load balancer probes over plain HTTP (factory_site.health); a redirect would fail it.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
SECURE_CONTENT_TYPE_NOSNIFF = True
# Behind a proxy that ends TLS, the header it sets (overwriting any the client sent) to say
# the request came over HTTPS; without it every request looks like plain HTTP.
if env("SECURE_PROXY_SSL_HEADER"):
    SECURE_PROXY_SSL_HEADER = (
        "HTTP_" + env("SECURE_PROXY_SSL_HEADER").strip().upper().replace("-", "_"),
        "https",
    )
if not DEBUG:
    # HTTPS only unless the operator turns it off (docs/deploy.md: plain HTTP). HSTS goes
    # out on HTTPS responses only, so it never locks out a site that has no certificate.
    SESSION_COOKIE_HTTPONLY = True
    SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", True)
    CSRF_COOKIE_SECURE = env_bool("SECURE_COOKIES", True)
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 365 * 24 * 3600)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
    if not SECURE_HSTS_PRELOAD:
        # Preloading writes the whole domain into browsers' built-in HTTPS-only lists, for
        # months after it is withdrawn: the domain owner's commitment, so opt-in, and its
        # check (W021) is silenced while it is off.
        SILENCED_SYSTEM_CHECKS = ["security.W021"]

# --- Trust: client addresses, login lockout, API token bounds (ADR 0006) ------------------
# Kept in one block: the production security settings above change independently.

# Proxies in front of the site that append to X-Forwarded-For. 0: believe only REMOTE_ADDR.
# Rate limits, refused-token counts and the login lockout all use this one answer.
FACTORY_TRUSTED_PROXIES = env_int("FACTORY_TRUSTED_PROXIES", 0)

# django-axes: after FACTORY_LOGIN_FAILURE_LIMIT failed logins for one username, or from one
# address, further logins (/login/ and /admin/login/) are refused until
# FACTORY_LOGIN_COOLOFF_MINUTES have passed since the last failure; `manage.py unlock` ends it.
INSTALLED_APPS += ["axes"]
MIDDLEWARE += ["axes.middleware.AxesMiddleware"]  # last, as axes asks
AUTHENTICATION_BACKENDS = [
    # First: refuses locked-out logins. It needs the request, so tests log in with
    # force_login, by posting the form, or client.login(request=HttpRequest(), ...).
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("FACTORY_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("FACTORY_LOGIN_COOLOFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]  # either one locks
AXES_CLIENT_IP_CALLABLE = "projects.throttles.client_address"
AXES_LOCKOUT_CALLABLE = "projects.views.locked_out"
# A success must not wipe the count: with an account of their own, an attacker could
# otherwise clear their address's failures between guesses at someone else's password.
AXES_RESET_ON_SUCCESS = False
AXES_VERBOSE = False  # no banner on every manage.py command; lockouts still log warnings

# API tokens: the longest lifetime a user may give a token, by their most privileged role
# in any project (a user with no role counts as an agent), and how many unexpired tokens
# one user may hold. No token is issued without an expiry.
FACTORY_TOKEN_MAX_DAYS = {
    "agent": env_int("FACTORY_TOKEN_MAX_DAYS_AGENT", REST_KNOX["TOKEN_TTL"].days),
    "verifier": env_int("FACTORY_TOKEN_MAX_DAYS_VERIFIER", 365),
    "reviewer": env_int("FACTORY_TOKEN_MAX_DAYS_REVIEWER", 365),
    "manager": env_int("FACTORY_TOKEN_MAX_DAYS_MANAGER", 365),
    "superuser": env_int("FACTORY_TOKEN_MAX_DAYS_SUPERUSER", 365),
}
if min(FACTORY_TOKEN_MAX_DAYS.values()) < 1:
    raise ImproperlyConfigured("every FACTORY_TOKEN_MAX_DAYS_* must be 1 or more")
FACTORY_TOKEN_MAX_PER_USER = env_int("FACTORY_TOKEN_MAX_PER_USER", 10)

# --- Single sign-on (OpenID Connect, mozilla-django-oidc; docs/deploy.md) ------------------
# Off unless FACTORY_OIDC_CLIENT_ID is set: then /oidc/authenticate/ and /oidc/callback/
# exist and the login page offers "Sign in with FACTORY_OIDC_PROVIDER_NAME". A sign-in finds
# its user by the provider's (issuer, subject) only (projects.Identity), and the role claim's
# values, mapped by FACTORY_OIDC_ROLE_MAP, decide the roles the map names (projects.claims).
FACTORY_OIDC_ENABLED = bool(env("FACTORY_OIDC_CLIENT_ID"))
FACTORY_OIDC_PROVIDER_NAME = env("FACTORY_OIDC_PROVIDER_NAME", "single sign-on")
# When set, an ID token from any other issuer is refused (set it: endpoints can be mistyped).
FACTORY_OIDC_ISSUER = env("FACTORY_OIDC_ISSUER")
FACTORY_OIDC_ROLE_CLAIM = env("FACTORY_OIDC_ROLE_CLAIM", "groups")
FACTORY_OIDC_ROLE_MAP = parse_role_map(env("FACTORY_OIDC_ROLE_MAP"))
# Off (0): no password signs in anywhere, the admin included; the login page shows only
# the single sign-on button. API tokens are not passwords and keep working.
FACTORY_PASSWORD_LOGIN = env_bool("FACTORY_PASSWORD_LOGIN", True)
if FACTORY_OIDC_ENABLED:
    OIDC_RP_CLIENT_ID = env("FACTORY_OIDC_CLIENT_ID")
    OIDC_RP_CLIENT_SECRET = env("FACTORY_OIDC_CLIENT_SECRET")
    OIDC_OP_AUTHORIZATION_ENDPOINT = env("FACTORY_OIDC_AUTHORIZATION_ENDPOINT")
    OIDC_OP_TOKEN_ENDPOINT = env("FACTORY_OIDC_TOKEN_ENDPOINT")
    OIDC_OP_USER_ENDPOINT = env("FACTORY_OIDC_USERINFO_ENDPOINT")
    OIDC_OP_JWKS_ENDPOINT = env("FACTORY_OIDC_JWKS_ENDPOINT")
    OIDC_RP_SIGN_ALGO = env("FACTORY_OIDC_SIGN_ALGO", "RS256")
    OIDC_RP_SCOPES = env("FACTORY_OIDC_SCOPES", "openid email profile")
    OIDC_USE_PKCE = True
    OIDC_TIMEOUT = env_int("FACTORY_OIDC_TIMEOUT", 10)
    LOGIN_REDIRECT_URL_FAILURE = "/login/?sso=failed"
    missing = [
        name
        for name in (
            "FACTORY_OIDC_CLIENT_SECRET",
            "FACTORY_OIDC_AUTHORIZATION_ENDPOINT",
            "FACTORY_OIDC_TOKEN_ENDPOINT",
            "FACTORY_OIDC_USERINFO_ENDPOINT",
            "FACTORY_OIDC_JWKS_ENDPOINT",
        )
        if not env(name)
    ]
    if missing:
        raise ImproperlyConfigured(
            f"FACTORY_OIDC_CLIENT_ID is set, so single sign-on is on, but {', '.join(missing)} "
            "not. The provider's endpoints are listed at ISSUER/.well-known/openid-configuration "
            "(authorization_endpoint, token_endpoint, userinfo_endpoint, jwks_uri). "
            "See docs/deploy.md, Single sign-on."
        )
    if not OIDC_RP_SIGN_ALGO.startswith(("RS", "ES")):
        raise ImproperlyConfigured(
            "FACTORY_OIDC_SIGN_ALGO must be an asymmetric algorithm checked against the "
            f"provider's published keys (RS256, ES256…), not {OIDC_RP_SIGN_ALGO!r}"
        )
    AUTHENTICATION_BACKENDS += ["projects.sso.SignInBackend"]
if not FACTORY_PASSWORD_LOGIN:
    if not FACTORY_OIDC_ENABLED:
        raise ImproperlyConfigured(
            "FACTORY_PASSWORD_LOGIN=0 turns passwords off, but single sign-on is not configured "
            "(FACTORY_OIDC_CLIENT_ID): nobody could sign in. See docs/deploy.md, Single sign-on."
        )
    AUTHENTICATION_BACKENDS.remove("django.contrib.auth.backends.ModelBackend")
