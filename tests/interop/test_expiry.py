"""Checked imports nobody applied let their uploads go after FACTORY_IMPORT_KEEP_DAYS."""

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from decisions.models import Decision
from factory_site.celery import app
from interop import jobs, services
from interop.models import ImportRun
from projects.errors import Conflict
from projects.models import Event
from tests.interop.test_import import adr, archive, upload

pytestmark = pytest.mark.django_db

DATA = archive({"docs/adr/0001-use-leases.md": adr("Use leases")})


def checked(flow, days_ago: float) -> ImportRun:
    run = upload(flow, "madr", DATA, dry_run=True)
    ImportRun.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(days=days_ago))
    return ImportRun.objects.get(pk=run.pk)


def test_a_checked_import_past_its_days_expires_keeping_its_report(flow):
    old = checked(flow, 7.1)
    checked(flow, 6.9)
    applied = upload(flow, "madr", DATA)
    ImportRun.objects.filter(pk=applied.pk).update(created_at=timezone.now() - timedelta(days=30))

    assert services.imports_expire() == 1

    old = ImportRun.objects.get(pk=old.pk)
    assert (old.state, bytes(old.upload), old.report["counts"]["created"]) == ("expired", b"", 1)
    assert list(ImportRun.objects.order_by("pk").values_list("state", flat=True)) == [
        "expired",
        "checked",
        "applied",
    ]
    event = Event.objects.get(transition="expire")
    assert (event.object_id, event.actor_id, event.to_state) == (old.pk, None, "expired")
    assert event.reason == "not applied within 7 days"
    assert services.imports_expire() == 0


def test_an_expired_import_is_not_applied_and_nothing_changes(flow):
    run = checked(flow, 8)
    services.imports_expire()
    events = Event.objects.count()

    with pytest.raises(Conflict) as refused:
        services.import_apply(run=run, actor=flow.manager)

    assert refused.value.code == "import_expired"
    assert (Decision.objects.count(), Event.objects.count()) == (0, events)


def test_a_checked_import_past_its_days_is_refused_before_the_sweep_runs(flow):
    run = checked(flow, 8)

    with pytest.raises(Conflict) as refused:
        services.import_apply(run=run, actor=flow.manager)

    assert refused.value.code == "import_expired"
    run = ImportRun.objects.get(pk=run.pk)
    assert (run.state, Decision.objects.count()) == ("checked", 0)
    assert not Event.objects.filter(transition__in=["apply", "expire"]).exists()


def test_the_keep_days_are_a_setting(flow, settings):
    settings.FACTORY_IMPORT_KEEP_DAYS = 1
    run = checked(flow, 1.5)

    assert jobs.imports_expire_job() == 1

    assert ImportRun.objects.get(pk=run.pk).state == "expired"


def test_celery_finds_every_scheduled_job_the_import_sweep_included():
    app.loader.import_default_modules()

    scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}

    assert "interop.jobs.imports_expire_job" in scheduled
    assert scheduled <= set(app.tasks)


def test_the_api_and_the_page_show_an_expired_import_and_refuse_to_apply_it(flow, api, client):
    run = checked(flow, 8)
    services.imports_expire()
    url = f"/api/v1/projects/{flow.project.slug}/imports/{run.pk}/"
    client.force_login(flow.manager)

    shown = api(flow.manager).get(url)
    applied = api(flow.manager).post(f"{url}apply/")
    page = client.get(f"/projects/{flow.project.slug}/imports/{run.pk}/")

    assert shown.json()["state"] == "expired"
    assert (applied.status_code, applied.json()["code"]) == (409, "import_expired")
    assert b"Not applied in time: its upload was let go." in page.content
    assert b'id="apply"' not in page.content
