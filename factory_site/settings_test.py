"""Test settings: only what tests need differs from the real settings."""

import os

os.environ.setdefault("CELERY_TASK_ALWAYS_EAGER", "1")

from factory_site.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
STATIC_ROOT = None  # WhiteNoise serves nothing in tests; no collectstatic needed
# Throttling is tested on its own (tests/test_limits.py); the rest of the suite makes
# many calls per user and must not trip it.
REST_FRAMEWORK = {
    **REST_FRAMEWORK,  # noqa: F405
    "DEFAULT_THROTTLE_RATES": {
        "anon": "100000/min",
        "user": "100000/min",
        "auth_failure": "100000/min",
    },
}
