"""Specs and their versions: creation, criteria validation, acceptance and the one-accepted rule."""

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from decisions import services
from decisions.models import Criterion, Spec, SpecVersion
from projects.errors import Conflict, PermissionDenied
from projects.models import Event, Project
from projects.roles import Role
from tests.factories import CRITERIA, member

V2_CRITERIA = [
    {"key": "AC-1", "text": "Claims are exclusive.", "proof": {"check": "review"}},
]


def create_spec(flow, criteria=CRITERIA, actor=None):
    return services.spec_create(
        project=flow.project,
        actor=actor or flow.manager,
        title="Claiming",
        body="# Claiming\n",
        criteria=criteria,
    )


def assert_nothing_stored(project, events_before=0):
    assert (Spec.objects.count(), SpecVersion.objects.count(), Criterion.objects.count()) == (
        0,
        0,
        0,
    )
    assert Event.objects.count() == events_before
    assert Project.objects.get(pk=project.pk).spec_seq == 0


@pytest.mark.django_db
def test_spec_create_makes_version_one_as_a_draft(flow):
    spec = create_spec(flow)

    version = spec.versions.get()
    assert (spec.key, spec.title, spec.created_by) == ("FM-S1", "Claiming", flow.manager)
    assert (version.number, version.state, version.author) == (1, "draft", flow.manager)
    assert version.body == "# Claiming\n"
    assert spec.current_version() is None


@pytest.mark.django_db
def test_spec_create_stores_the_criteria_in_order(flow):
    spec = create_spec(flow)

    rows = list(spec.versions.get().criteria.values_list("position", "key", "text", "proof"))
    assert rows == [
        (
            0,
            "AC-1",
            "Claims are exclusive.",
            {"check": "tests", "select": "tests/test_claim.py::*"},
        ),
        (1, "AC-2", "The queue is shown.", {"check": "evidence", "kind": "screenshot"}),
        (2, "AC-3", "Readable code.", {"check": "review"}),
    ]


@pytest.mark.django_db
def test_spec_create_records_a_create_event_for_the_version(flow):
    spec = create_spec(flow)

    event = Event.objects.get()
    assert (event.object_key, event.transition, event.from_state, event.to_state) == (
        "FM-S1 v1",
        "create",
        "",
        "draft",
    )
    assert (event.actor, event.project, event.task, event.subject) == (
        flow.manager,
        flow.project,
        None,
        spec.versions.get(),
    )


@pytest.mark.django_db
@pytest.mark.parametrize(("title", "body", "field"), [(" ", "# b", "title"), ("t", " ", "body")])
def test_spec_create_needs_a_title_and_a_body(flow, title, body, field):
    with pytest.raises(ValidationError) as refused:
        services.spec_create(
            project=flow.project, actor=flow.manager, title=title, body=body, criteria=[]
        )

    assert list(refused.value.message_dict) == [field]
    assert_nothing_stored(flow.project)


@pytest.mark.django_db
def test_spec_keys_count_up_per_project(flow, other_flow):
    keys = [create_spec(flow).key, create_spec(flow).key, create_spec(other_flow).key]

    assert keys == ["FM-S1", "FM-S2", "OT-S1"]


@pytest.mark.django_db
@pytest.mark.parametrize("role", [Role.AGENT, Role.REVIEWER, Role.VERIFIER, None])
def test_only_managers_of_the_project_create_specs(flow, other_flow, role):
    actor = member(flow.project, role) if role else other_flow.manager
    events_before = Event.objects.count()

    with pytest.raises(PermissionDenied) as refused:
        create_spec(flow, actor=actor)

    assert refused.value.code == "permission_denied"
    assert_nothing_stored(flow.project, events_before)


MALFORMED_CRITERIA = {
    "not a list": {"key": "AC-1", "text": "x", "proof": {"check": "review"}},
    "not an object": ["AC-1"],
    "bad key": [{"key": "1 bad key", "text": "x", "proof": {"check": "review"}}],
    "missing key": [{"text": "x", "proof": {"check": "review"}}],
    "duplicate key": [
        {"key": "AC-1", "text": "x", "proof": {"check": "review"}},
        {"key": "AC-1", "text": "y", "proof": {"check": "review"}},
    ],
    "missing text": [{"key": "AC-1", "proof": {"check": "review"}}],
    "blank text": [{"key": "AC-1", "text": "   ", "proof": {"check": "review"}}],
    "missing proof": [{"key": "AC-1", "text": "x"}],
    "unknown check": [{"key": "AC-1", "text": "x", "proof": {"check": "vibes"}}],
    "tests without select": [{"key": "AC-1", "text": "x", "proof": {"check": "tests"}}],
    "tests with blank select": [
        {"key": "AC-1", "text": "x", "proof": {"check": "tests", "select": " "}}
    ],
    "evidence of unknown kind": [
        {"key": "AC-1", "text": "x", "proof": {"check": "evidence", "kind": "video"}}
    ],
    "evidence without kind": [{"key": "AC-1", "text": "x", "proof": {"check": "evidence"}}],
}


@pytest.mark.parametrize("shape", MALFORMED_CRITERIA)
def test_clean_criteria_refuses_malformed_shapes(shape):
    with pytest.raises(ValidationError) as refused:
        services.clean_criteria(MALFORMED_CRITERIA[shape])

    assert list(refused.value.message_dict) == ["criteria"]


@pytest.mark.django_db
@pytest.mark.parametrize("shape", MALFORMED_CRITERIA)
def test_spec_create_with_malformed_criteria_stores_nothing(flow, shape):
    events_before = Event.objects.count()

    with pytest.raises(ValidationError) as refused:
        create_spec(flow, criteria=MALFORMED_CRITERIA[shape])

    assert list(refused.value.message_dict) == ["criteria"]
    assert_nothing_stored(flow.project, events_before)


def test_clean_criteria_normalises_each_proof():
    cleaned = services.clean_criteria(
        [
            {"key": "AC-1", "text": " x ", "proof": {"check": "tests", "select": " t::* ", "n": 1}},
            {"key": "AC-2", "text": "y", "proof": {"check": "evidence", "kind": "log", "n": 1}},
            {"key": "AC-3", "text": "z", "proof": {"check": "review", "n": 1}},
        ]
    )

    assert cleaned == [
        {"key": "AC-1", "text": "x", "proof": {"check": "tests", "select": "t::*"}},
        {"key": "AC-2", "text": "y", "proof": {"check": "evidence", "kind": "log"}},
        {"key": "AC-3", "text": "z", "proof": {"check": "review"}},
    ]


@pytest.mark.django_db
def test_spec_version_create_adds_the_next_draft(flow):
    spec = flow.spec()

    version = services.spec_version_create(
        spec=spec, actor=flow.manager, body="# v2\n", criteria=V2_CRITERIA
    )

    assert (version.number, version.state, version.body) == (2, "draft", "# v2\n")
    assert list(version.criteria.values_list("key", flat=True)) == ["AC-1"]
    assert spec.current_version().number == 1
    event = Event.objects.latest("id")
    assert (event.object_key, event.transition, event.to_state) == ("FM-S1 v2", "create", "draft")


@pytest.mark.django_db
def test_spec_version_create_is_for_managers_only(flow):
    spec = flow.spec()
    events_before = Event.objects.count()

    with pytest.raises(PermissionDenied):
        services.spec_version_create(
            spec=spec, actor=flow.reviewer, body="# v2\n", criteria=V2_CRITERIA
        )

    assert list(spec.versions.values_list("number", flat=True)) == [1]
    assert Event.objects.count() == events_before


@pytest.mark.django_db
def test_accepting_the_first_version_makes_it_current(flow):
    spec = create_spec(flow)
    version = spec.versions.get()

    services.spec_version_accept(version=version, actor=flow.manager, reason="agreed")

    version.refresh_from_db()
    assert (version.state, spec.current_version()) == ("accepted", version)
    assert version.accepted_at is not None
    event = Event.objects.latest("id")
    assert (event.transition, event.from_state, event.to_state, event.reason) == (
        "accept",
        "draft",
        "accepted",
        "agreed",
    )


@pytest.mark.django_db
def test_accepting_a_new_version_supersedes_the_current_one(flow):
    spec = flow.spec()
    v2 = services.spec_version_create(spec=spec, actor=flow.manager, body="v2", criteria=[])
    events_before = Event.objects.count()

    services.spec_version_accept(version=v2, actor=flow.manager)

    assert dict(spec.versions.values_list("number", "state")) == {1: "superseded", 2: "accepted"}
    events = Event.objects.order_by("id")[events_before:]
    assert [(e.object_key, e.transition, e.from_state, e.to_state, e.reason) for e in events] == [
        ("FM-S1 v1", "supersede", "accepted", "superseded", "superseded by v2"),
        ("FM-S1 v2", "accept", "draft", "accepted", ""),
    ]


@pytest.mark.django_db
@pytest.mark.parametrize("state", ["accepted", "superseded"])
def test_only_a_draft_version_can_be_accepted(flow, state):
    spec = flow.spec()
    v2 = services.spec_version_create(spec=spec, actor=flow.manager, body="v2", criteria=[])
    services.spec_version_accept(version=v2, actor=flow.manager)
    version = spec.versions.get(state=state)
    events_before = Event.objects.count()

    with pytest.raises(Conflict) as refused:
        services.spec_version_accept(version=version, actor=flow.manager)

    assert (refused.value.code, refused.value.extra) == ("invalid_state", {"state": state})
    assert dict(spec.versions.values_list("number", "state")) == {1: "superseded", 2: "accepted"}
    assert Event.objects.count() == events_before


@pytest.mark.django_db
@pytest.mark.parametrize("role", [Role.AGENT, Role.REVIEWER, Role.VERIFIER, None])
def test_only_managers_of_the_project_accept_versions(flow, other_flow, role):
    spec = flow.spec()
    v2 = services.spec_version_create(spec=spec, actor=flow.manager, body="v2", criteria=[])
    actor = member(flow.project, role) if role else other_flow.manager
    events_before = Event.objects.count()

    with pytest.raises(PermissionDenied) as refused:
        services.spec_version_accept(version=v2, actor=actor)

    assert refused.value.code == "permission_denied"
    assert dict(spec.versions.values_list("number", "state")) == {1: "accepted", 2: "draft"}
    assert Event.objects.count() == events_before


@pytest.mark.django_db
def test_a_spec_has_at_most_one_accepted_version(flow):
    spec = create_spec(flow)
    SpecVersion.objects.create(spec=spec, number=2, body="v2", state="accepted")

    with pytest.raises(IntegrityError), transaction.atomic():
        SpecVersion.objects.create(spec=spec, number=3, body="v3", state="accepted")

    assert list(spec.versions.values_list("number", "state")) == [(1, "draft"), (2, "accepted")]


@pytest.mark.django_db
def test_other_specs_may_each_have_an_accepted_version(flow):
    first, second = create_spec(flow), create_spec(flow)

    SpecVersion.objects.create(spec=first, number=2, body="v2", state="accepted")
    SpecVersion.objects.create(spec=second, number=2, body="v2", state="accepted")

    assert SpecVersion.objects.filter(state="accepted").count() == 2
