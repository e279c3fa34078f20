"""Evidence quotas: bytes and files per attempt and per project, enforced in evidence_attach."""

import threading
from pathlib import Path

import pytest
from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from evidence import services, storage
from evidence.models import Evidence, Provenance
from projects.errors import TooLarge
from tests.conftest import postgres_only

LINE = b"x" * 19 + b"\n"  # 20 bytes


def files_in(root) -> list[str]:
    root = Path(root)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def attach(attempt, actor, content=LINE, name="run.log"):
    return services.evidence_attach(
        attempt=attempt, actor=actor, file=ContentFile(content, name=name), kind="log"
    )


def upload(client, attempt, content, name="run.log"):
    data = {"file": SimpleUploadedFile(name, content, content_type="text/plain"), "kind": "log"}
    return client.post(f"/api/v1/attempts/{attempt.pk}/evidence/", data, format="multipart")


@pytest.mark.django_db
def test_an_upload_past_the_attempts_byte_quota_is_413_with_the_figures(flow, api, settings):
    settings.FACTORY_QUOTA_ATTEMPT_BYTES = 30
    _, attempt = flow.claimed()
    client = api(flow.agent)
    kept = upload(client, attempt, LINE).json()
    blobs = files_in(settings.MEDIA_ROOT)

    response = upload(client, attempt, b"y" * 10 + b"\n")

    assert response.status_code == 413
    assert response.json() == {
        "detail": f"with this file, the agent evidence of {attempt} would reach 31 bytes,"
        " past its quota of 30",
        "code": "quota_exceeded",
        "used": 20,
        "limit": 30,
        "scope": "attempt",
        "what": "bytes",
    }
    assert list(Evidence.objects.values_list("pk", flat=True)) == [kept["id"]]
    assert files_in(settings.MEDIA_ROOT) == blobs
    assert files_in(settings.FACTORY_UPLOAD_TEMP_DIR) == []


@pytest.mark.django_db
def test_a_file_that_reaches_a_quota_exactly_is_accepted(flow, settings):
    settings.FACTORY_QUOTA_ATTEMPT_BYTES = 40
    settings.FACTORY_QUOTA_ATTEMPT_FILES = 2
    _, attempt = flow.claimed()

    attach(attempt, flow.agent, LINE, name="one.log")
    attach(attempt, flow.agent, b"z" * 19 + b"\n", name="two.log")

    assert Evidence.objects.filter(attempt=attempt).count() == 2


@pytest.mark.django_db
def test_the_attempts_file_quota_counts_files(flow, settings):
    settings.FACTORY_QUOTA_ATTEMPT_FILES = 2
    _, attempt = flow.claimed()
    attach(attempt, flow.agent, b"1\n")
    attach(attempt, flow.agent, b"2\n")

    with pytest.raises(TooLarge) as refused:
        attach(attempt, flow.agent, b"3\n")

    assert (refused.value.code, refused.value.extra) == (
        "quota_exceeded",
        {"used": 2, "limit": 2, "scope": "attempt", "what": "files"},
    )
    assert Evidence.objects.count() == 2
    assert len(files_in(settings.MEDIA_ROOT)) == 2


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("setting", "value", "what", "used"),
    [
        ("FACTORY_QUOTA_PROJECT_BYTES", 50, "bytes", 40),
        ("FACTORY_QUOTA_PROJECT_FILES", 2, "files", 2),
    ],
)
def test_the_projects_quotas_count_every_attempt_of_the_project(
    flow, settings, setting, value, what, used
):
    setattr(settings, setting, value)
    _, first = flow.claimed(title="one")
    attach(first, flow.agent, LINE, name="a.log")
    attach(first, flow.agent, b"w" * 19 + b"\n", name="b.log")
    _, second = flow.claimed(title="two", agent=flow.agent2)

    with pytest.raises(TooLarge) as refused:
        attach(second, flow.agent2, b"v" * 19 + b"\n")

    assert refused.value.extra == {"used": used, "limit": value, "scope": "project", "what": what}
    assert refused.value.detail.startswith("with this file, the agent evidence of project FM")
    assert Evidence.objects.filter(attempt=second).count() == 0


@pytest.mark.django_db
def test_an_agent_filling_its_quota_leaves_the_verifier_its_own_room(flow, settings):
    settings.FACTORY_QUOTA_ATTEMPT_FILES = 1
    settings.FACTORY_QUOTA_PROJECT_FILES = 1
    _, attempt = flow.claimed()
    attach(attempt, flow.agent)

    report = attach(attempt, flow.verifier, b"verified\n", name="ci.log")

    assert (report.provenance, report.authoritative) == (Provenance.VERIFIER, True)
    with pytest.raises(TooLarge):
        attach(attempt, flow.verifier, b"again\n", name="ci2.log")


@pytest.mark.django_db
def test_gate_reports_use_no_quota(flow, settings):
    settings.FACTORY_QUOTA_ATTEMPT_FILES = 1
    settings.FACTORY_QUOTA_ATTEMPT_BYTES = 20
    _, attempt = flow.claimed()
    name, sha256, size, _ = storage.store_bytes(b"# tests-pass\n" * 100)
    Evidence.objects.create(
        attempt=attempt, kind="note", file=name, sha256=sha256, size=size, provenance="gate"
    )

    evidence = attach(attempt, flow.agent)

    assert (evidence.size, Evidence.objects.filter(attempt=attempt).count()) == (20, 2)


@pytest.mark.django_db
def test_bytes_stored_once_still_count_for_each_attach(flow, settings):
    settings.FACTORY_QUOTA_ATTEMPT_BYTES = 30
    _, attempt = flow.claimed()
    attach(attempt, flow.agent, LINE, name="first.log")

    with pytest.raises(TooLarge) as refused:
        attach(attempt, flow.agent, LINE, name="same-bytes.log")

    assert refused.value.extra == {"used": 20, "limit": 30, "scope": "attempt", "what": "bytes"}
    assert Evidence.objects.count() == 1
    assert len(files_in(settings.MEDIA_ROOT)) == 1  # the first file's blob stays


@pytest.mark.django_db
def test_a_quota_set_to_zero_is_off(flow, settings):
    for name in services.QUOTAS.values():
        setattr(settings, name, 0)
    _, attempt = flow.claimed()

    for n in range(3):
        attach(attempt, flow.agent, LINE * (n + 1), name=f"{n}.log")

    assert Evidence.objects.count() == 3


def test_the_defaults_leave_room_for_the_largest_upload():
    assert settings.FACTORY_QUOTA_ATTEMPT_BYTES >= settings.FACTORY_MAX_UPLOAD_BYTES
    assert settings.FACTORY_QUOTA_PROJECT_BYTES >= settings.FACTORY_QUOTA_ATTEMPT_BYTES
    assert settings.FACTORY_QUOTA_PROJECT_FILES >= settings.FACTORY_QUOTA_ATTEMPT_FILES > 0


@postgres_only
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("scope", ["project", "attempt"])
def test_two_uploads_at_once_do_not_both_fit_under_the_quota(flow, settings, monkeypatch, scope):
    setattr(settings, f"FACTORY_QUOTA_{scope.upper()}_FILES", 1)
    _, first = flow.claimed(title="one")
    if scope == "project":  # two agents, each on its own attempt of the project
        _, second = flow.claimed(title="two", agent=flow.agent2)
        uploads = [(first, flow.agent), (second, flow.agent2)]
    else:  # two verifier uploads to one attempt: no lease lock to queue them
        uploads = [(first, flow.verifier), (first, flow.verifier)]
    barrier, store_blob = threading.Barrier(2), storage.store_blob

    def store_together(*args, **kwargs):
        stored = store_blob(*args, **kwargs)
        barrier.wait(10)  # both have passed the early check; the locked one decides
        return stored

    monkeypatch.setattr(storage, "store_blob", store_together)
    outcomes = []

    def upload_one(n, attempt, actor):
        try:
            attach(attempt, actor, f"upload {n}\n".encode(), name=f"{n}.log")
            outcomes.append("stored")
        except TooLarge as exc:
            outcomes.append(exc.code)
        finally:
            connection.close()

    threads = [threading.Thread(target=upload_one, args=(n, *u)) for n, u in enumerate(uploads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert sorted(outcomes) == ["quota_exceeded", "stored"]
    assert Evidence.objects.count() == 1
    # The refused upload's bytes stay, named by no row and counted by no quota: a store
    # never deletes, as another request may already rely on them (ADR 0017).
    kept = Evidence.objects.get().file.name
    assert kept in files_in(settings.MEDIA_ROOT)
    assert len(files_in(settings.MEDIA_ROOT)) == 2


@pytest.mark.django_db(transaction=True)
def test_the_migration_gives_existing_evidence_its_attempts_project(flow):
    _, attempt = flow.claimed()
    before = [("evidence", "0004_gate_run_finished_index")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps.get_model("evidence", "Evidence")
    old.objects.create(
        attempt_id=attempt.pk,
        kind="log",
        file="evidence/00/00/old",
        sha256="0" * 64,
        size=1,
        media_type="text/plain",
        name="old.log",
        provenance="agent",
    )

    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

    assert list(Evidence.objects.values_list("project_id", flat=True)) == [flow.project.pk]
