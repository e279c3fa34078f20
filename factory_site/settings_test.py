"""Test settings: only what tests need differs from the real settings."""

import os
import tempfile

os.environ.setdefault("CELERY_TASK_ALWAYS_EAGER", "1")
# Set in the environment, not below, so that the servers and workers tests start as
# subprocesses with the real settings inherit them: a key no deployment shares, one
# process's own rate counts (each test's server is one process, or throttles nothing),
# and plain HTTP (the test client and the live server speak no TLS).
os.environ.setdefault("SECRET_KEY", "test-only-key-" + "x" * 50)
os.environ.setdefault("FACTORY_SINGLE_PROCESS", "1")
os.environ.setdefault("SECURE_SSL_REDIRECT", "0")
# Tests run the runner's job in the submitting thread, so they can assert what it did.
os.environ.setdefault("FACTORY_EAGER_BACKGROUND_QUEUES", "")
# Tests' webhook receivers listen on 127.0.0.1 (tests/events asserts the refusal with it off).
os.environ.setdefault("FACTORY_WEBHOOK_ALLOW_PRIVATE", "1")
# Tests' repositories are made under the temporary directory (pytest's tmp_path) and
# served on 127.0.0.1 (tests/projects asserts the refusals with these off).
os.environ.setdefault("FACTORY_LOCAL_REPOSITORY_ROOTS", tempfile.gettempdir())
os.environ.setdefault("FACTORY_REPOSITORY_ALLOW_PRIVATE", "1")

from factory_site.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES = {
    # The store the site runs on: it refuses to delete, so no test passes by deleting.
    "default": {"BACKEND": "evidence.backends.EvidenceFileSystemStorage"},
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
