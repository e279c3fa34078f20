"""Attaching evidence: provenance follows the actor, criteria follow the pinned spec version."""

import hashlib
from pathlib import Path

import pytest
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.files.base import ContentFile

from decisions import services as decision_services
from evidence import services, storage
from evidence.models import Evidence, blob_name
from projects.errors import Conflict, PermissionDenied, TooLarge
from projects.models import Event
from projects.roles import Role
from tasks import attempts
from tests.factories import UserFactory, expire_lease, member

LOG = b"5 passed in 0.02s\n"


def blob_files() -> list[str]:
    root = Path(settings.MEDIA_ROOT)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def attach(attempt, actor, content=LOG, kind="log", criteria=(), name="pytest.log"):
    return services.evidence_attach(
        attempt=attempt,
        actor=actor,
        file=ContentFile(content, name=name),
        kind=kind,
        criteria=criteria,
    )


def lose_the_lease_while_storing(monkeypatch, attempt):
    """The lease runs out after the bytes are stored and before the row is written."""
    store_blob = storage.store_blob

    def store_then_lose_the_lease(*args, **kwargs):
        stored = store_blob(*args, **kwargs)
        expire_lease(attempt)
        return stored

    monkeypatch.setattr(storage, "store_blob", store_then_lose_the_lease)


def assert_nothing_stored(events_before=None):
    assert Evidence.objects.count() == 0
    assert blob_files() == []
    if events_before is not None:
        assert Event.objects.count() == events_before


@pytest.mark.django_db
def test_the_lease_holder_attaches_agent_evidence(flow):
    _, attempt = flow.claimed()

    evidence = attach(attempt, flow.agent)

    assert (evidence.attempt, evidence.kind, evidence.uploaded_by) == (attempt, "log", flow.agent)
    assert (evidence.provenance, evidence.authoritative) == ("agent", False)
    assert (evidence.name, evidence.media_type, evidence.size) == ("pytest.log", "text/plain", 18)
    assert evidence.sha256 == hashlib.sha256(LOG).hexdigest()
    assert evidence.summary == {"lines": 1}
    assert blob_files() == [blob_name(evidence.sha256)]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("role", "provenance", "authoritative"),
    [
        (Role.VERIFIER, "verifier", True),
        (Role.REVIEWER, "human", False),
        (Role.MANAGER, "human", False),
    ],
)
def test_provenance_follows_the_actors_role(flow, role, provenance, authoritative):
    _, attempt = flow.claimed()
    actor = member(flow.project, role)

    evidence = attach(attempt, actor)

    assert (evidence.provenance, evidence.authoritative) == (provenance, authoritative)
    assert evidence.uploaded_by == actor


@pytest.mark.django_db
def test_an_agent_who_is_also_a_verifier_still_writes_agent_evidence(flow):
    _, attempt = flow.claimed()
    agent = member(flow.project, Role.VERIFIER, flow.agent.username)

    evidence = attach(attempt, agent)

    assert (evidence.provenance, evidence.authoritative) == ("agent", False)


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["stranger", "other agent", "other project verifier"])
def test_outsiders_cannot_attach_evidence(flow, other_flow, who):
    _, attempt = flow.claimed()
    actor = {
        "stranger": lambda: UserFactory(),
        "other agent": lambda: flow.agent2,
        "other project verifier": lambda: other_flow.verifier,
    }[who]()
    events_before = Event.objects.count()

    with pytest.raises(PermissionDenied):
        attach(attempt, actor)

    assert_nothing_stored(events_before)


@pytest.mark.django_db
def test_an_expired_lease_cannot_attach_and_leaves_no_file(flow):
    _, attempt = flow.claimed(lease_seconds=60)
    expire_lease(attempt)

    with pytest.raises(Conflict) as refused:
        attach(attempt, flow.agent)

    assert refused.value.code == "lease_lost"
    assert_nothing_stored()


@pytest.mark.django_db
def test_a_submitted_attempt_takes_no_more_agent_evidence(flow):
    _, attempt = flow.checking()

    with pytest.raises(Conflict) as refused:
        attach(attempt, flow.agent)

    assert refused.value.code == "lease_lost"
    assert_nothing_stored()


@pytest.mark.django_db
def test_a_lease_lost_while_storing_writes_no_row_and_deletes_nothing(flow, monkeypatch):
    # Another request may already rely on the bytes (ADR 0017): they stay, uncounted.
    _, attempt = flow.claimed(lease_seconds=60)
    lose_the_lease_while_storing(monkeypatch, attempt)
    events_before = Event.objects.count()

    with pytest.raises(Conflict) as refused:
        attach(attempt, flow.agent)

    assert refused.value.code == "lease_lost"
    assert (Evidence.objects.count(), Event.objects.count()) == (0, events_before)
    assert blob_files() == [blob_name(hashlib.sha256(LOG).hexdigest())]


@pytest.mark.django_db
def test_a_lease_lost_while_storing_keeps_a_blob_other_evidence_uses(flow, monkeypatch):
    _, attempt = flow.claimed(lease_seconds=60)
    earlier = attach(attempt, flow.agent)
    lose_the_lease_while_storing(monkeypatch, attempt)

    with pytest.raises(Conflict):
        attach(attempt, flow.agent)

    assert list(Evidence.objects.all()) == [earlier]
    assert blob_files() == [blob_name(earlier.sha256)]


@pytest.mark.django_db
def test_a_verifier_may_attach_while_the_attempt_is_checked(flow):
    _, attempt = flow.checking()

    evidence = attach(attempt, flow.verifier)

    assert (evidence.provenance, evidence.authoritative) == ("verifier", True)


@pytest.mark.django_db
@pytest.mark.parametrize("state", ["done", "failed"])
def test_nobody_attaches_to_an_ended_attempt(flow, state):
    _, attempt = getattr(flow, state)()

    with pytest.raises(Conflict) as refused:
        attach(attempt, flow.verifier)

    assert (refused.value.status, refused.value.code) == (409, "invalid_state")
    assert "evidence goes to a live attempt" in refused.value.detail
    assert_nothing_stored()


@pytest.mark.django_db
def test_criteria_keys_resolve_against_the_pinned_spec_version(flow):
    spec = flow.spec()
    _, attempt = flow.claimed(spec=spec)

    evidence = attach(attempt, flow.agent, criteria=[" AC-2", "AC-1", "AC-1"])

    pinned = spec.versions.get(number=1)
    assert set(evidence.criteria.all()) == set(pinned.criteria.filter(key__in=["AC-1", "AC-2"]))


@pytest.mark.django_db
def test_criteria_stay_on_the_pinned_version_after_the_spec_moves(flow):
    spec = flow.spec()
    _, attempt = flow.claimed(spec=spec)
    v2_criteria = [{"key": "AC-9", "text": "New.", "proof": {"check": "review"}}]
    v2 = decision_services.spec_version_create(
        spec=spec, actor=flow.manager, body="v2", criteria=v2_criteria
    )
    decision_services.spec_version_accept(version=v2, actor=flow.manager)

    evidence = attach(attempt, flow.agent, criteria=["AC-1"])

    assert [(c.key, c.spec_version.number) for c in evidence.criteria.all()] == [("AC-1", 1)]
    with pytest.raises(ValidationError):
        attach(attempt, flow.agent, criteria=["AC-9"], content=b"other\n")
    assert Evidence.objects.count() == 1


@pytest.mark.django_db
def test_an_unknown_criterion_is_refused_and_nothing_is_stored(flow):
    _, attempt = flow.claimed(spec=flow.spec())

    with pytest.raises(ValidationError) as refused:
        attach(attempt, flow.agent, criteria=["AC-1", "AC-7"])

    assert refused.value.message_dict == {
        "criteria": ["unknown criteria AC-7 (this spec version has: AC-1, AC-2, AC-3)"]
    }
    assert_nothing_stored()


@pytest.mark.django_db
def test_a_task_without_a_spec_has_no_criteria_to_claim(flow):
    _, attempt = flow.claimed()

    with pytest.raises(ValidationError) as refused:
        attach(attempt, flow.agent, criteria=["AC-1"])

    assert list(refused.value.message_dict) == ["criteria"]
    assert_nothing_stored()


@pytest.mark.django_db
def test_a_file_over_the_upload_limit_is_refused_with_413(flow, settings):
    _, attempt = flow.claimed()
    settings.FACTORY_MAX_UPLOAD_BYTES = len(LOG) - 1

    with pytest.raises(TooLarge) as refused:
        attach(attempt, flow.agent)

    assert (refused.value.status, refused.value.code) == (413, "too_large")
    assert_nothing_stored()


@pytest.mark.django_db
def test_a_file_at_the_upload_limit_is_accepted(flow, settings):
    _, attempt = flow.claimed()
    settings.FACTORY_MAX_UPLOAD_BYTES = len(LOG)

    evidence = attach(attempt, flow.agent)

    assert evidence.size == len(LOG)


@pytest.mark.django_db
def test_an_unknown_kind_is_refused(flow):
    _, attempt = flow.claimed()

    with pytest.raises(ValidationError) as refused:
        attach(attempt, flow.agent, kind="video")

    assert list(refused.value.message_dict) == ["kind"]
    assert_nothing_stored()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("kind", "content"),
    [("junit", b"not xml"), ("diff", b"hello\n"), ("screenshot", b"<svg/>"), ("log", b"\x00")],
)
def test_a_file_that_is_not_its_kind_is_refused_and_not_stored(flow, kind, content):
    _, attempt = flow.claimed()

    with pytest.raises(ValidationError) as refused:
        attach(attempt, flow.agent, kind=kind, content=content)

    assert list(refused.value.message_dict) == ["file"]
    assert_nothing_stored()


@pytest.mark.django_db
def test_attaching_evidence_writes_no_event_and_changes_no_state(flow):
    task, attempt = flow.claimed()
    events_before = Event.objects.count()

    attach(attempt, flow.agent)
    attach(attempt, flow.verifier, content=b"ci log\n")

    task.refresh_from_db()
    attempt.refresh_from_db()
    assert (task.state, attempt.state) == ("claimed", "running")
    assert Event.objects.count() == events_before


@pytest.mark.django_db
def test_evidence_of_an_earlier_attempt_stays_with_it(flow):
    _, first = flow.claimed()
    attach(first, flow.agent)
    attempts.attempt_release(attempt=first, actor=flow.agent, reason="handing over")
    second = attempts.task_claim(agent=flow.agent2)

    attach(second, flow.agent2)

    assert [e.attempt.number for e in Evidence.objects.order_by("id")] == [1, 2]
    assert len(blob_files()) == 1
