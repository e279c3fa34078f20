"""Production defaults: what the settings refuse, what they turn on, and `check --deploy`."""

import importlib.util
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

ROOT = Path(__file__).resolve().parent.parent
KEY = secrets.token_urlsafe(50)


def load_settings(**environ):
    """Run factory_site/settings.py afresh with exactly ``environ`` (and SQLite)."""
    environ = {"DATABASE_URL": "sqlite:///unused.sqlite3", **environ}
    spec = importlib.util.find_spec("factory_site.settings")
    module = importlib.util.module_from_spec(spec)  # not the one in sys.modules
    with mock.patch.dict(os.environ, environ, clear=True):
        spec.loader.exec_module(module)
    return vars(module)


def documented_environment() -> dict:
    """The environment file of docs/deploy.md's production profile, line by line."""
    page = (ROOT / "docs" / "deploy.md").read_text()
    block = re.search(r"```sh\n# /etc/factory-memory/env[^\n]*\n(.*?)```", page, re.S)[1]
    lines = [line for line in block.splitlines() if line and not line.startswith("#")]
    return dict(line.split("=", 1) for line in lines)


def test_with_debug_off_a_missing_secret_key_stops_the_site_with_how_to_make_one():
    with pytest.raises(ImproperlyConfigured) as refused:
        load_settings(FACTORY_SINGLE_PROCESS="1")

    assert str(refused.value).startswith("SECRET_KEY is not set, and with DEBUG off")
    assert "python3 -c 'import secrets; print(secrets.token_urlsafe(50))'" in str(refused.value)


def test_an_empty_secret_key_is_refused_like_a_missing_one():
    with pytest.raises(ImproperlyConfigured, match=r"^SECRET_KEY is not set"):
        load_settings(SECRET_KEY="", FACTORY_SINGLE_PROCESS="1")


def test_only_debug_has_a_built_in_key():
    assert load_settings(DEBUG="1")["SECRET_KEY"] == "insecure-development-key-change-me"
    with pytest.raises(ImproperlyConfigured, match=r"^SECRET_KEY is not set"):
        load_settings(DEBUG="0", FACTORY_SINGLE_PROCESS="1")


def test_with_debug_off_and_no_cache_url_the_site_refuses_to_count_rates_per_process():
    with pytest.raises(ImproperlyConfigured) as refused:
        load_settings(SECRET_KEY=KEY)

    assert str(refused.value).startswith("CACHE_URL is not set: API rate limits would be")
    assert "Set CACHE_URL=redis://127.0.0.1:6379/1" in str(refused.value)
    assert "or FACTORY_SINGLE_PROCESS=1 if exactly one process serves the site" in str(
        refused.value
    )


def test_rates_are_counted_in_redis_or_in_memory_only_where_that_is_exact():
    shared = load_settings(SECRET_KEY=KEY, CACHE_URL="redis://127.0.0.1:6379/1")
    single = load_settings(SECRET_KEY=KEY, FACTORY_SINGLE_PROCESS="1")
    debug = load_settings(DEBUG="1")

    assert shared["CACHES"]["default"] == {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": "redis://127.0.0.1:6379/1",
    }
    assert single["CACHES"]["default"]["BACKEND"].endswith("LocMemCache")
    assert debug["CACHES"]["default"]["BACKEND"].endswith("LocMemCache")


POSTGRES = "postgres://factory@db.internal/factory"


def test_behind_a_transaction_pooler_nothing_is_prepared_and_no_cursor_outlives_a_transaction():
    loaded = load_settings(DEBUG="1", DATABASE_URL=POSTGRES, DATABASE_POOL_MODE="transaction")

    database = loaded["DATABASES"]["default"]
    assert (database["OPTIONS"]["prepare_threshold"], database["DISABLE_SERVER_SIDE_CURSORS"]) == (
        None,
        True,
    )
    assert loaded["DATABASE_POOL_MODE"] == "transaction"


def test_by_default_the_claim_is_prepared_and_server_side_cursors_are_allowed():
    database = load_settings(DEBUG="1", DATABASE_URL=POSTGRES)["DATABASES"]["default"]

    assert (database["OPTIONS"]["prepare_threshold"], database["DISABLE_SERVER_SIDE_CURSORS"]) == (
        5,
        False,
    )


def test_an_unknown_pool_mode_is_refused_naming_the_two_there_are():
    with pytest.raises(ImproperlyConfigured) as refused:
        load_settings(DEBUG="1", DATABASE_URL=POSTGRES, DATABASE_POOL_MODE="statement")

    assert str(refused.value) == "DATABASE_POOL_MODE must be session or transaction"


def test_with_debug_off_the_site_is_https_only_by_default():
    site = load_settings(SECRET_KEY=KEY, CACHE_URL="redis://127.0.0.1:6379/1")

    assert (site["SESSION_COOKIE_SECURE"], site["CSRF_COOKIE_SECURE"]) == (True, True)
    assert site["SECURE_SSL_REDIRECT"] is True
    assert (site["SECURE_HSTS_SECONDS"], site["SECURE_HSTS_INCLUDE_SUBDOMAINS"]) == (31536000, True)
    assert site["SECURE_HSTS_PRELOAD"] is False
    assert site["SILENCED_SYSTEM_CHECKS"] == ["security.W021"]
    assert "SECURE_PROXY_SSL_HEADER" not in site


def test_the_operator_can_turn_each_https_default_off_or_opt_in_to_preload():
    site = load_settings(
        SECRET_KEY=KEY,
        FACTORY_SINGLE_PROCESS="1",
        SECURE_COOKIES="0",
        SECURE_SSL_REDIRECT="0",
        SECURE_HSTS_SECONDS="0",
        SECURE_HSTS_INCLUDE_SUBDOMAINS="0",
    )
    preloaded = load_settings(SECRET_KEY=KEY, FACTORY_SINGLE_PROCESS="1", SECURE_HSTS_PRELOAD="1")

    assert (site["SESSION_COOKIE_SECURE"], site["CSRF_COOKIE_SECURE"]) == (False, False)
    assert (site["SECURE_SSL_REDIRECT"], site["SECURE_HSTS_SECONDS"]) == (False, 0)
    assert site["SECURE_HSTS_INCLUDE_SUBDOMAINS"] is False
    assert preloaded["SECURE_HSTS_PRELOAD"] is True
    assert "SILENCED_SYSTEM_CHECKS" not in preloaded


def test_debug_leaves_plain_http_alone_for_runserver():
    site = load_settings(DEBUG="1")
    https_only = {"SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE", "SECURE_SSL_REDIRECT"}

    # Left unset: Django's defaults, all off.
    assert https_only.isdisjoint(site)
    assert "SECURE_HSTS_SECONDS" not in site


def test_the_proxy_header_is_read_as_django_names_it():
    site = load_settings(DEBUG="1", SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto")

    assert site["SECURE_PROXY_SSL_HEADER"] == ("HTTP_X_FORWARDED_PROTO", "https")


@pytest.mark.django_db
def test_plain_http_is_redirected_unless_the_trusted_proxy_says_https(settings):
    site = load_settings(
        SECRET_KEY=KEY, FACTORY_SINGLE_PROCESS="1", SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto"
    )
    settings.SECURE_SSL_REDIRECT = site["SECURE_SSL_REDIRECT"]
    settings.SECURE_PROXY_SSL_HEADER = site["SECURE_PROXY_SSL_HEADER"]

    plain = Client().get("/login/?next=/review/")
    proxied = Client().get("/login/", HTTP_X_FORWARDED_PROTO="https")

    assert (plain.status_code, plain["Location"]) == (
        301,
        "https://testserver/login/?next=/review/",
    )
    assert proxied.status_code == 200


@pytest.mark.django_db
def test_https_responses_carry_hsts_and_secure_cookies():
    response = Client().get("/login/", secure=True)

    assert response["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains"
    assert response.cookies["csrftoken"]["secure"] is True


def test_redis_hands_a_job_to_a_second_worker_only_after_the_longest_time_limit():
    default = load_settings(DEBUG="1")
    long_runs = load_settings(DEBUG="1", FACTORY_RUNNER_TIME_LIMIT="30000")
    short = load_settings(
        DEBUG="1", FACTORY_RUNNER_TIME_LIMIT="60", FACTORY_LANDING_TIME_LIMIT="60"
    )
    chosen = load_settings(DEBUG="1", CELERY_VISIBILITY_TIMEOUT="99999")

    def timeout(loaded):
        return loaded["CELERY_BROKER_TRANSPORT_OPTIONS"]["visibility_timeout"]

    # The lander may work 6 hours by default: longer than the runner's 2.
    assert timeout(default) == default["FACTORY_LANDING_TIME_LIMIT"] + 600 == 22200
    assert timeout(long_runs) == 30600
    assert timeout(short) == 3600
    assert timeout(chosen) == 99999


def test_one_usage_report_may_cost_100_usd_unless_the_operator_says_otherwise():
    default = load_settings(DEBUG="1")
    chosen = load_settings(DEBUG="1", FACTORY_USAGE_MAX_REPORT_USD=" 250 ")

    assert default["FACTORY_USAGE_MAX_REPORT_USD"] == 100
    assert chosen["FACTORY_USAGE_MAX_REPORT_USD"] == 250


@pytest.mark.parametrize("value", ["0", "-5", "1.5", "1e3", "lots", "", "1000000", "٣"])
def test_a_usage_bound_that_is_not_a_whole_number_of_dollars_stops_the_site(value):
    with pytest.raises(ImproperlyConfigured) as refused:
        load_settings(DEBUG="1", FACTORY_USAGE_MAX_REPORT_USD=value)

    assert str(refused.value) == (
        f"FACTORY_USAGE_MAX_REPORT_USD={value.strip()!r}: the most one usage report may cost"
        " must be a whole number of US dollars from 1 to 999999 (default 100). See"
        " docs/deploy.md."
    )


def test_manage_py_says_why_it_cannot_start_instead_of_a_later_error(tmp_path):
    database = f"sqlite:///{tmp_path / 'db.sqlite3'}"

    run = subprocess.run(
        [sys.executable, "manage.py", "makemigrations", "--check", "--dry-run"],
        cwd=ROOT,
        env={"DATABASE_URL": database},
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert (run.returncode, run.stdout) == (1, "")
    assert run.stderr.startswith("Factory Memory cannot start: SECRET_KEY is not set")
    assert not (tmp_path / "db.sqlite3").exists()


def test_manage_py_still_takes_the_settings_option(tmp_path):
    database = f"sqlite:///{tmp_path / 'db.sqlite3'}"

    run = subprocess.run(
        [sys.executable, "manage.py", "check", "--settings", "factory_site.settings_test"],
        cwd=ROOT,
        env={"DATABASE_URL": database},
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert (run.returncode, run.stdout) == (0, "System check identified no issues (0 silenced).\n")


def test_check_deploy_is_clean_with_exactly_the_documented_environment(tmp_path):
    environ = documented_environment()
    assert environ["SECRET_KEY"] == "…"  # a placeholder: no real key in the docs
    environ |= {"SECRET_KEY": KEY, "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"}

    run = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert (run.returncode, run.stderr) == (0, "")
    assert run.stdout == "System check identified no issues (1 silenced).\n"
