"""Content-addressed storage of evidence, and rows that never change once written."""

import hashlib
from pathlib import Path

import pytest
from django.conf import settings
from django.core.files.base import ContentFile
from django.db import transaction

from evidence import storage
from evidence.models import Evidence, blob_name
from projects.models import AppendOnlyError, Event

LOG = b"collected 5 items\n5 passed in 0.02s\n"


def blob_files() -> list[str]:
    root = Path(settings.MEDIA_ROOT)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_blobs_are_named_by_their_sha256():
    digest = hashlib.sha256(LOG).hexdigest()

    assert blob_name(digest) == f"evidence/{digest[:2]}/{digest[2:4]}/{digest}"


@pytest.mark.django_db
def test_store_blob_writes_new_bytes_once():
    digest = hashlib.sha256(LOG).hexdigest()

    first = storage.store_blob(ContentFile(LOG))
    second = storage.store_blob(ContentFile(LOG))

    assert first == (blob_name(digest), digest, len(LOG), True)
    assert second == (blob_name(digest), digest, len(LOG), False)
    assert blob_files() == [blob_name(digest)]
    assert (Path(settings.MEDIA_ROOT) / blob_name(digest)).read_bytes() == LOG


@pytest.mark.django_db
def test_sha256_of_hashes_in_chunks_and_rewinds(monkeypatch):
    monkeypatch.setattr(storage, "CHUNK", 7)
    file = ContentFile(LOG * 3)

    digest, size = storage.sha256_of(file)

    assert (digest, size) == (hashlib.sha256(LOG * 3).hexdigest(), len(LOG) * 3)
    assert file.read() == LOG * 3


@pytest.mark.django_db
def test_the_same_bytes_attached_twice_are_stored_once(flow):
    _, attempt = flow.claimed()

    first = flow.attach(attempt, LOG, name="pytest.log")
    second = flow.attach(attempt, LOG, name="again.log")

    digest = hashlib.sha256(LOG).hexdigest()
    assert Evidence.objects.count() == 2
    assert (first.sha256, second.sha256) == (digest, digest)
    assert first.file.name == second.file.name == blob_name(digest)
    assert (first.name, second.name, first.size) == ("pytest.log", "again.log", len(LOG))
    assert blob_files() == [blob_name(digest)]


@pytest.mark.django_db
def test_the_same_bytes_from_different_attempts_share_one_file(flow):
    _, first_attempt = flow.claimed(title="one")
    _, second_attempt = flow.claimed(title="two", agent=flow.agent2)

    flow.attach(first_attempt, LOG)
    flow.attach(second_attempt, LOG)
    flow.attach(second_attempt, b"other bytes\n")

    assert Evidence.objects.count() == 3
    assert len(blob_files()) == 2


@pytest.mark.django_db
def test_stored_evidence_reads_back_the_bytes_it_was_given(flow):
    _, attempt = flow.claimed()
    evidence = flow.attach(attempt, LOG)

    with storage.open_blob(evidence.file.name) as blob:
        content = blob.read()

    assert content == LOG
    assert hashlib.sha256(content).hexdigest() == evidence.sha256


# --- Evidence and events never change ------------------------------------------------------


@pytest.fixture
def evidence(flow):
    _, attempt = flow.claimed()
    return flow.attach(attempt, LOG, name="pytest.log")


def snapshot(model, pk):
    return model.objects.filter(pk=pk).values().get()


EVIDENCE_WRITES = {
    "save": lambda e: (setattr(e, "provenance", "verifier"), e.save()),
    "save update_fields": lambda e: e.save(update_fields=["kind"]),
    "delete": lambda e: e.delete(),
    "manager update": lambda e: Evidence.objects.update(provenance="verifier"),
    "filtered update": lambda e: Evidence.objects.filter(pk=e.pk).update(kind="note"),
    "related update": lambda e: e.attempt.evidence.update(provenance="gate"),
    "bulk update": lambda e: Evidence.objects.bulk_update([e], ["name"]),
    "manager delete": lambda e: Evidence.objects.all().delete(),
    "filtered delete": lambda e: Evidence.objects.filter(pk=e.pk).delete(),
    "related delete": lambda e: e.attempt.evidence.all().delete(),
}


@pytest.mark.django_db
@pytest.mark.parametrize("write", EVIDENCE_WRITES)
def test_evidence_is_never_updated_or_deleted(evidence, write):
    before = snapshot(Evidence, evidence.pk)

    # A savepoint: bulk_update opens an atomic block that the refusal marks for rollback.
    with pytest.raises(AppendOnlyError), transaction.atomic():
        EVIDENCE_WRITES[write](Evidence.objects.get(pk=evidence.pk))

    assert snapshot(Evidence, evidence.pk) == before
    assert Evidence.objects.count() == 1
    assert blob_files() == [evidence.file.name]


EVENT_WRITES = {
    "save": lambda e: (setattr(e, "reason", "rewritten"), e.save()),
    "delete": lambda e: e.delete(),
    "manager update": lambda e: Event.objects.update(reason="rewritten"),
    "filtered update": lambda e: Event.objects.filter(pk=e.pk).update(to_state="done"),
    "related update": lambda e: e.task.events.update(actor=None),
    "bulk update": lambda e: Event.objects.bulk_update([e], ["reason"]),
    "manager delete": lambda e: Event.objects.all().delete(),
    "filtered delete": lambda e: Event.objects.filter(pk=e.pk).delete(),
    "related delete": lambda e: e.task.events.all().delete(),
}


@pytest.mark.django_db
@pytest.mark.parametrize("write", EVENT_WRITES)
def test_events_are_never_updated_or_deleted(flow, write):
    task, _ = flow.claimed()
    event = Event.objects.filter(task=task).latest("id")
    before, count = snapshot(Event, event.pk), Event.objects.count()

    # A savepoint: bulk_update opens an atomic block that the refusal marks for rollback.
    with pytest.raises(AppendOnlyError), transaction.atomic():
        EVENT_WRITES[write](Event.objects.get(pk=event.pk))

    assert snapshot(Event, event.pk) == before
    assert Event.objects.count() == count


@pytest.mark.django_db
def test_the_criteria_of_evidence_cannot_be_changed_later(flow):
    _, attempt = flow.claimed(spec=flow.spec())
    evidence = flow.attach(attempt, criteria=["AC-1"])
    criterion = attempt.spec_version.criteria.get(key="AC-2")

    with pytest.raises(AppendOnlyError), transaction.atomic():
        evidence.criteria.add(criterion)
    with pytest.raises(AppendOnlyError), transaction.atomic():
        criterion.evidence.add(evidence)
    with pytest.raises(AppendOnlyError), transaction.atomic():
        evidence.criteria.clear()

    assert [c.key for c in evidence.criteria.all()] == ["AC-1"]
