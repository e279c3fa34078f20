"""Requests that try to set what only the server decides about decisions, specs, their
versions and criteria, and a project's settings: who decided and how, keys, numbers, states,
authors and counters.

Each write refuses a body naming a field it does not write: 400 ``invalid`` whose ``fields``
name it ("read-only field" when the resource shows it, else "unknown field"), and nothing
stored changes.
"""

import pytest

from decisions.models import Decision
from projects.models import Project
from tests.factories import CRITERIA
from tests.hostile.world import assert_refused
from tests.hostile.writes import PAST, READ_ONLY, UNKNOWN, Stored, attempt_call, call, refused, why

# A field a caller may not write is refused by the serializer before anything is stored, and
# a dead token before any query but its own; the writes themselves run on PostgreSQL in their
# modules' tests (ADR 0015, "engine_neutral").
pytestmark = pytest.mark.engine_neutral


# --- Decisions and specs ----------------------------------------------------------------------

DECISION_FIELDS = [
    ("state", lambda w: "accepted"),
    ("decided_by", lambda w: w.flow.manager.username),
    ("decided_by_id", lambda w: w.flow.manager.pk),
    ("decided_at", lambda w: PAST),
    ("verdict_reason", lambda w: "accepted long ago"),
    ("proposed_by", lambda w: w.flow.agent2.username),
    ("proposed_by_id", lambda w: w.flow.agent2.pk),
    ("proposed_in", lambda w: w.attempt.pk),
    ("key", lambda w: "FM-D99"),
    ("number", lambda w: 99),
    ("superseded_by", lambda w: [w.decision.key]),
    ("created_at", lambda w: PAST),
]
DECISION_SHOWN = {"state", "decided_by", "decided_at", "verdict_reason", "proposed_by"}
DECISION_SHOWN |= {"proposed_in", "key", "superseded_by", "created_at", "project"}


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "value"), DECISION_FIELDS, ids=[f for f, _ in DECISION_FIELDS])
def test_a_proposal_refuses_who_decided_it_and_how(world, api, settings, name, value):
    before = Stored.take(settings)

    response = call(
        world,
        api,
        "reviewer",
        "post",
        "/api/v1/decisions/",
        {"project": "FM", "title": "t", "context": "c", "decision": "d", name: value(world)},
    )

    refused(response, before, settings, name, why(name, DECISION_SHOWN))
    assert Decision.objects.get(pk=world.decision.pk).state == "proposed"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "extra",
    [
        {"proposed_by": "fm-manager"},
        {"proposed_in": "REVIEW_ATTEMPT"},
        {"state": "accepted"},
        {"project": "OT"},
        {"decided_by": "fm-manager"},
    ],
    ids=lambda extra: next(iter(extra)),
)
def test_a_proposal_in_an_attempt_refuses_another_owner_or_place(world, api, settings, extra):
    extra = {k: world.review_attempt.pk if v == "REVIEW_ATTEMPT" else v for k, v in extra.items()}
    before = Stored.take(settings)

    response = attempt_call(
        world,
        api,
        "agent",
        "post",
        "decisions",
        {"title": "t", "context": "c", "decision": "d", **extra},
    )

    refused(response, before, settings, next(iter(extra)), READ_ONLY)


VERSION_FIELDS = [
    ("state", lambda w: "accepted", READ_ONLY),
    ("number", lambda w: 99, READ_ONLY),
    ("author", lambda w: w.flow.agent.pk, READ_ONLY),
    ("source_decision", lambda w: w.decision.key, READ_ONLY),
    ("accepted_at", lambda w: PAST, READ_ONLY),
    ("spec", lambda w: "OT-S1", READ_ONLY),
    ("author_id", lambda w: w.flow.agent.pk, UNKNOWN),
]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "value", "reason"), VERSION_FIELDS, ids=[f[0] for f in VERSION_FIELDS]
)
def test_a_new_spec_version_refuses_its_number_state_and_author(
    world, api, settings, name, value, reason
):
    before = Stored.take(settings)

    response = call(
        world,
        api,
        "manager",
        "post",
        f"/api/v1/specs/{world.spec.key}/versions/",
        {"body": "v3", "criteria": CRITERIA, name: value(world)},
    )

    refused(response, before, settings, name, reason)


SPEC_FIELDS = [
    ("key", lambda w: "FM-S99", READ_ONLY),
    ("number", lambda w: 99, UNKNOWN),
    ("state", lambda w: "accepted", UNKNOWN),
    ("created_by", lambda w: w.flow.agent.pk, UNKNOWN),
    ("current_version", lambda w: 1, READ_ONLY),
    ("versions", lambda w: [{"number": 1, "state": "accepted"}], READ_ONLY),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "value", "reason"), SPEC_FIELDS, ids=[f[0] for f in SPEC_FIELDS])
def test_a_new_spec_refuses_its_key_and_versions(world, api, settings, name, value, reason):
    before = Stored.take(settings)

    response = call(
        world,
        api,
        "manager",
        "post",
        "/api/v1/specs/",
        {"project": "FM", "title": "t", "body": "b", "criteria": CRITERIA, name: value(world)},
    )

    refused(response, before, settings, name, reason)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "criterion",
    [{"check": "tests"}, {"id": 1}, {"state": "met"}],
    ids=lambda extra: next(iter(extra)),
)
def test_a_criterion_with_a_field_it_does_not_have_is_refused(world, api, settings, criterion):
    before = Stored.take(settings)
    name = next(iter(criterion))

    response = call(
        world,
        api,
        "manager",
        "post",
        f"/api/v1/specs/{world.spec.key}/versions/",
        {"body": "v3", "criteria": [{**CRITERIA[0], **criterion}]},
    )

    body = assert_refused(response, 400, "invalid")
    assert body["fields"] == {"criteria": [f"0: {name}: {UNKNOWN}"]}
    before.assert_unchanged(settings)


NESTED_DECISION_FIELDS = [
    ("alternatives", {"option": "o", "chosen": True}, "chosen"),
    ("amendments", {"spec": "FM-S1", "body": "b", "criteria": CRITERIA, "number": 9}, "number"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("field", "item", "name"), NESTED_DECISION_FIELDS, ids=[f for f, _, _ in NESTED_DECISION_FIELDS]
)
def test_a_nested_object_of_a_proposal_refuses_a_field_it_does_not_have(
    world, api, settings, field, item, name
):
    before = Stored.take(settings)

    response = call(
        world,
        api,
        "manager",
        "post",
        "/api/v1/decisions/",
        {"project": "FM", "title": "t", "context": "c", "decision": "d", field: [item]},
    )

    body = assert_refused(response, 400, "invalid")
    assert body["fields"] == {field: [f"0: {name}: {UNKNOWN}"]}
    before.assert_unchanged(settings)


PROJECT_FIELDS = [
    ("slug", lambda w: "XX", READ_ONLY),
    ("my_roles", lambda w: ["agent", "verifier", "reviewer", "manager"], READ_ONLY),
    ("monthly_quota_usd", lambda w: 1000, UNKNOWN),
    ("task_seq", lambda w: 0, UNKNOWN),
    ("spec_seq", lambda w: 0, UNKNOWN),
    ("decision_seq", lambda w: 0, UNKNOWN),
    ("created_at", lambda w: PAST, UNKNOWN),
    ("members", lambda w: [w.other.agent.pk], UNKNOWN),
    ("id", lambda w: w.other.project.pk, UNKNOWN),
]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "value", "reason"), PROJECT_FIELDS, ids=[f[0] for f in PROJECT_FIELDS]
)
def test_a_project_patch_refuses_its_slug_counters_and_unknown_settings(
    world, api, settings, name, value, reason
):
    before = Stored.take(settings)

    response = call(
        world,
        api,
        "manager",
        "patch",
        "/api/v1/projects/FM/",
        {"name": "Renamed", name: value(world)},
    )

    refused(response, before, settings, name, reason)
    assert Project.objects.get(slug="FM").name != "Renamed"
