"""Decision records: proposing, accepting (with supersession and spec amendments) and rejecting."""

import pytest
from django.core.exceptions import ValidationError

from decisions import services
from decisions.models import Decision, SpecAmendment, SpecVersion
from projects.errors import Conflict, PermissionDenied
from projects.models import Event, Project
from projects.roles import Role
from tasks import attempts
from tests.factories import expire_lease, member

AMENDED_CRITERIA = [
    {"key": "AC-1", "text": "Leases last five minutes.", "proof": {"check": "review"}},
    {"key": "AC-2", "text": "Heartbeats renew.", "proof": {"check": "tests", "select": "t::*"}},
]


def propose(flow, actor=None, **kwargs):
    kwargs.setdefault("title", "Claim with SKIP LOCKED")
    kwargs.setdefault("context", "Two agents must never get the same task.")
    kwargs.setdefault("decision", "Use SELECT ... FOR UPDATE SKIP LOCKED.")
    return services.decision_propose(project=flow.project, actor=actor or proposer(flow), **kwargs)


def proposer(flow):
    """A reviewer who proposes; others decide (nobody decides their own proposal)."""
    return member(flow.project, Role.REVIEWER, f"{flow.project.slug.lower()}-proposer")


def accepted(flow, **kwargs):
    decision = propose(flow, **kwargs)
    return services.decision_accept(decision=decision, actor=flow.reviewer)


def amendment(spec, body="# Claiming v2\n", criteria=AMENDED_CRITERIA):
    return {"spec": spec, "body": body, "criteria": criteria}


def versions(spec):
    return dict(spec.versions.values_list("number", "state"))


def assert_nothing_proposed(project, events_before):
    assert Decision.objects.count() == 0
    assert Project.objects.get(pk=project.pk).decision_seq == 0
    assert Event.objects.count() == events_before


def assert_unchanged(decision, state, events_before):
    decision.refresh_from_db()
    assert (decision.state, decision.decided_by, decision.verdict_reason) == (state, None, "")
    assert Event.objects.count() == events_before


# --- Proposing --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_reviewer_proposes_a_decision(flow):
    decision = propose(
        flow, flow.reviewer, alternatives=[{"option": "Table lock", "reason": "serial"}, "Redis"]
    )

    assert (decision.key, decision.state, decision.proposed_by) == (
        "FM-D1",
        "proposed",
        flow.reviewer,
    )
    assert decision.proposed_in is None
    assert decision.alternatives == [
        {"option": "Table lock", "reason": "serial"},
        {"option": "Redis", "reason": ""},
    ]
    event = Event.objects.get(object_key="FM-D1")
    assert (event.transition, event.from_state, event.to_state, event.actor) == (
        "propose",
        "",
        "proposed",
        flow.reviewer,
    )


@pytest.mark.django_db
def test_decision_keys_count_up_per_project(flow, other_flow):
    keys = [propose(flow).key, propose(flow).key, propose(other_flow).key]

    assert keys == ["FM-D1", "FM-D2", "OT-D1"]


@pytest.mark.django_db
def test_an_agent_proposes_during_its_attempt_and_the_task_is_concerned(flow):
    task, attempt = flow.claimed()
    other = flow.draft(title="other")

    decision = propose(flow, actor=flow.agent, attempt=attempt, tasks=[other])

    assert (decision.proposed_by, decision.proposed_in) == (flow.agent, attempt)
    assert set(decision.tasks.all()) == {task, other}
    event = Event.objects.get(transition="propose")
    assert (event.object_key, event.actor, event.task) == ("FM-D1", flow.agent, None)


@pytest.mark.django_db
@pytest.mark.parametrize("role", [Role.AGENT, Role.VERIFIER])
def test_agents_and_verifiers_cannot_propose_without_an_attempt(flow, role):
    flow.claimed()
    events_before = Event.objects.count()

    with pytest.raises(PermissionDenied) as refused:
        propose(flow, actor=flow.agent if role == Role.AGENT else flow.verifier)

    assert refused.value.code == "permission_denied"
    assert_nothing_proposed(flow.project, events_before)


@pytest.mark.django_db
def test_an_agent_cannot_propose_on_another_agents_attempt(flow):
    _, attempt = flow.claimed()
    events_before = Event.objects.count()

    with pytest.raises(PermissionDenied) as refused:
        propose(flow, actor=flow.agent2, attempt=attempt)

    assert refused.value.code == "not_lease_holder"
    assert_nothing_proposed(flow.project, events_before)


@pytest.mark.django_db
def test_an_expired_lease_cannot_propose(flow):
    _, attempt = flow.claimed(lease_seconds=60)
    expire_lease(attempt)
    events_before = Event.objects.count()

    with pytest.raises(Conflict) as refused:
        propose(flow, actor=flow.agent, attempt=attempt)

    assert refused.value.code == "lease_lost"
    assert_nothing_proposed(flow.project, events_before)


@pytest.mark.django_db
def test_a_submitted_attempt_cannot_propose(flow):
    _, attempt = flow.checking()
    events_before = Event.objects.count()

    with pytest.raises(Conflict) as refused:
        propose(flow, actor=flow.agent, attempt=attempt)

    assert refused.value.code == "lease_lost"
    assert_nothing_proposed(flow.project, events_before)


@pytest.mark.django_db
@pytest.mark.parametrize("field", ["title", "context", "decision"])
def test_propose_needs_title_context_and_decision(flow, field):
    with pytest.raises(ValidationError) as refused:
        propose(flow, **{field: "  "})

    assert list(refused.value.message_dict) == [field]
    assert_nothing_proposed(flow.project, 0)


@pytest.mark.django_db
@pytest.mark.parametrize("state", ["proposed", "rejected", "superseded"])
def test_only_accepted_decisions_can_be_superseded(flow, state):
    old = propose(flow, title="old")
    if state == "rejected":
        services.decision_reject(decision=old, actor=flow.reviewer, reason="no")
    elif state == "superseded":
        services.decision_accept(decision=old, actor=flow.reviewer)
        accepted(flow, title="newer", supersedes=[old])
    events_before = Event.objects.count()

    with pytest.raises(ValidationError) as refused:
        propose(flow, supersedes=[old])

    assert refused.value.message_dict == {
        "supersedes": [f"only accepted decisions can be superseded: {old.key}"]
    }
    assert Decision.objects.count() == (2 if state == "superseded" else 1)
    assert Event.objects.count() == events_before


@pytest.mark.django_db
@pytest.mark.parametrize("field", ["supersedes", "tasks", "specs", "amendments"])
def test_objects_of_another_project_are_refused(flow, other_flow, field):
    foreign = {
        "supersedes": lambda: [accepted(other_flow)],
        "tasks": lambda: [other_flow.draft()],
        "specs": lambda: [other_flow.spec()],
        "amendments": lambda: [amendment(other_flow.spec())],
    }[field]()
    events_before = Event.objects.count()

    with pytest.raises(ValidationError) as refused:
        propose(flow, **{field: foreign})

    assert list(refused.value.message_dict) == ["specs" if field == "amendments" else field]
    assert Decision.objects.filter(project=flow.project).count() == 0
    assert Event.objects.count() == events_before


@pytest.mark.django_db
def test_an_attempt_of_another_project_is_refused(flow, other_flow):
    _, attempt = other_flow.claimed()
    member(flow.project, Role.AGENT, other_flow.agent.username)
    events_before = Event.objects.count()

    with pytest.raises(ValidationError) as refused:
        propose(flow, actor=other_flow.agent, attempt=attempt)

    assert list(refused.value.message_dict) == ["project"]
    assert Decision.objects.count() == 0
    assert Event.objects.count() == events_before


@pytest.mark.django_db
def test_an_amendment_is_written_against_the_current_version(flow):
    spec = flow.spec()

    decision = propose(flow, actor=flow.manager, amendments=[amendment(spec)])

    stored = SpecAmendment.objects.get(decision=decision)
    assert (stored.spec, stored.base_version, stored.body) == (
        spec,
        spec.versions.get(number=1),
        "# Claiming v2\n",
    )
    assert stored.criteria == AMENDED_CRITERIA
    assert list(decision.specs.all()) == [spec]
    assert versions(spec) == {1: "accepted"}


# --- Accepting ---------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("role", [Role.REVIEWER, Role.MANAGER])
def test_reviewers_and_managers_accept_a_decision(flow, role):
    decision = propose(flow)
    actor = flow.reviewer if role == Role.REVIEWER else flow.manager

    services.decision_accept(decision=decision, actor=actor, reason=" measured ")

    decision.refresh_from_db()
    assert (decision.state, decision.decided_by, decision.verdict_reason) == (
        "accepted",
        actor,
        "measured",
    )
    assert decision.decided_at is not None
    event = Event.objects.latest("id")
    assert (event.object_key, event.transition, event.from_state, event.to_state) == (
        "FM-D1",
        "accept",
        "proposed",
        "accepted",
    )
    assert (event.actor, event.reason) == (actor, "measured")


@pytest.mark.django_db
@pytest.mark.parametrize("role", [Role.AGENT, Role.VERIFIER, None])
def test_agents_verifiers_and_strangers_cannot_accept(flow, other_flow, role):
    decision = propose(flow)
    actor = member(flow.project, role) if role else other_flow.manager
    events_before = Event.objects.count()

    with pytest.raises(PermissionDenied) as refused:
        services.decision_accept(decision=decision, actor=actor)

    assert refused.value.code == "permission_denied"
    assert_unchanged(decision, "proposed", events_before)


@pytest.mark.django_db
def test_accepting_a_decision_supersedes_the_ones_it_names(flow):
    d1 = accepted(flow, title="table lock")
    d2 = propose(flow, title="skip locked", supersedes=[d1])
    events_before = Event.objects.count()

    services.decision_accept(decision=d2, actor=flow.reviewer)

    assert dict(Decision.objects.values_list("key", "state")) == {
        "FM-D1": "superseded",
        "FM-D2": "accepted",
    }
    events = Event.objects.order_by("id")[events_before:]
    assert [(e.object_key, e.transition, e.from_state, e.to_state, e.reason) for e in events] == [
        ("FM-D1", "supersede", "accepted", "superseded", "superseded by FM-D2"),
        ("FM-D2", "accept", "proposed", "accepted", ""),
    ]


@pytest.mark.django_db
def test_a_supersession_chain_leaves_only_the_latest_accepted(flow):
    d1 = accepted(flow, title="table lock")
    d2 = accepted(flow, title="skip locked", supersedes=[d1])

    d3 = accepted(flow, title="order by priority", supersedes=[d2])

    assert dict(Decision.objects.values_list("key", "state")) == {
        "FM-D1": "superseded",
        "FM-D2": "superseded",
        "FM-D3": "accepted",
    }
    assert list(d3.supersedes.all()) == [d2]
    assert list(d1.superseded_by.all()) == [d2]


@pytest.mark.django_db
def test_a_decision_superseded_meanwhile_blocks_the_accept(flow):
    d1 = accepted(flow, title="table lock")
    late = propose(flow, title="late", supersedes=[d1])
    accepted(flow, title="early", supersedes=[d1])
    events_before = Event.objects.count()

    with pytest.raises(Conflict) as refused:
        services.decision_accept(decision=late, actor=flow.reviewer)

    assert refused.value.code == "not_supersedable"
    assert_unchanged(late, "proposed", events_before)
    assert Decision.objects.get(pk=d1.pk).state == "superseded"


@pytest.mark.django_db
def test_accepting_an_amending_decision_creates_and_accepts_the_new_spec_version(flow):
    spec = flow.spec()
    decision = propose(flow, actor=flow.reviewer, amendments=[amendment(spec)])

    services.decision_accept(decision=decision, actor=flow.manager, reason="agreed")

    v2 = spec.versions.get(number=2)
    assert versions(spec) == {1: "superseded", 2: "accepted"}
    assert (v2.source_decision, v2.body, v2.author) == (decision, "# Claiming v2\n", flow.reviewer)
    assert list(v2.criteria.values_list("key", "text")) == [
        ("AC-1", "Leases last five minutes."),
        ("AC-2", "Heartbeats renew."),
    ]
    assert spec.current_version() == v2
    assert Decision.objects.get(pk=decision.pk).state == "accepted"


@pytest.mark.django_db
def test_an_amending_accept_records_every_transition(flow):
    spec = flow.spec()
    decision = propose(flow, amendments=[amendment(spec)])
    events_before = Event.objects.count()

    services.decision_accept(decision=decision, actor=flow.manager)

    events = Event.objects.order_by("id")[events_before:]
    assert [(e.object_key, e.transition, e.from_state, e.to_state, e.reason) for e in events] == [
        ("FM-S1 v2", "create", "", "draft", ""),
        ("FM-S1 v1", "supersede", "accepted", "superseded", "superseded by v2"),
        ("FM-S1 v2", "accept", "draft", "accepted", "amended by FM-D1"),
        ("FM-D1", "accept", "proposed", "accepted", ""),
    ]


@pytest.mark.django_db
def test_only_a_manager_may_accept_an_amending_decision(flow):
    spec = flow.spec()
    decision = propose(flow, amendments=[amendment(spec)])
    events_before = Event.objects.count()

    with pytest.raises(PermissionDenied) as refused:
        services.decision_accept(decision=decision, actor=flow.reviewer)

    assert refused.value.detail == "FM-D1 amends a spec; only a manager may decide it"
    assert_unchanged(decision, "proposed", events_before)
    assert versions(spec) == {1: "accepted"}


@pytest.mark.django_db
def test_an_amendment_is_refused_when_the_spec_moved_after_the_proposal(flow):
    spec = flow.spec()
    decision = propose(flow, amendments=[amendment(spec)])
    v2 = services.spec_version_create(spec=spec, actor=flow.manager, body="v2", criteria=[])
    services.spec_version_accept(version=v2, actor=flow.manager)
    events_before = Event.objects.count()

    with pytest.raises(Conflict) as refused:
        services.decision_accept(decision=decision, actor=flow.manager)

    assert refused.value.code == "spec_moved"
    assert_unchanged(decision, "proposed", events_before)
    assert versions(spec) == {1: "superseded", 2: "accepted"}


@pytest.mark.django_db
def test_of_two_amendments_of_one_version_only_the_first_accepted_applies(flow):
    spec = flow.spec()
    first = propose(flow, title="five minutes", amendments=[amendment(spec, body="# five\n")])
    second = propose(flow, title="ten minutes", amendments=[amendment(spec, body="# ten\n")])
    services.decision_accept(decision=first, actor=flow.manager)
    events_before = Event.objects.count()

    with pytest.raises(Conflict) as refused:
        services.decision_accept(decision=second, actor=flow.manager)

    assert refused.value.code == "spec_moved"
    assert (spec.current_version().number, spec.current_version().body) == (2, "# five\n")
    assert_unchanged(second, "proposed", events_before)


@pytest.mark.django_db
def test_a_refused_amendment_rolls_back_the_specs_already_amended(flow):
    unchanged, moved = flow.spec(), flow.spec()
    decision = propose(flow, amendments=[amendment(unchanged), amendment(moved)])
    v2 = services.spec_version_create(spec=moved, actor=flow.manager, body="v2", criteria=[])
    services.spec_version_accept(version=v2, actor=flow.manager)
    events_before = Event.objects.count()

    with pytest.raises(Conflict) as refused:
        services.decision_accept(decision=decision, actor=flow.manager)

    assert refused.value.code == "spec_moved"
    assert versions(unchanged) == {1: "accepted"}
    assert SpecVersion.objects.filter(source_decision=decision).count() == 0
    assert_unchanged(decision, "proposed", events_before)


@pytest.mark.django_db
@pytest.mark.parametrize("state", ["accepted", "rejected"])
def test_a_decided_decision_cannot_be_accepted(flow, state):
    decision = propose(flow)
    if state == "accepted":
        services.decision_accept(decision=decision, actor=flow.reviewer)
    else:
        services.decision_reject(decision=decision, actor=flow.reviewer, reason="no")
    events_before = Event.objects.count()

    with pytest.raises(Conflict) as refused:
        services.decision_accept(decision=decision, actor=flow.manager)

    assert (refused.value.code, refused.value.extra) == ("invalid_state", {"state": state})
    decision.refresh_from_db()
    assert (decision.state, decision.decided_by) == (state, flow.reviewer)
    assert Event.objects.count() == events_before


# --- Rejecting --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_reject_records_the_reason(flow):
    decision = propose(flow, actor=flow.manager)

    services.decision_reject(decision=decision, actor=flow.reviewer, reason=" bloats backups ")

    decision.refresh_from_db()
    assert (decision.state, decision.decided_by, decision.verdict_reason) == (
        "rejected",
        flow.reviewer,
        "bloats backups",
    )
    event = Event.objects.latest("id")
    assert (event.transition, event.from_state, event.to_state, event.reason) == (
        "reject",
        "proposed",
        "rejected",
        "bloats backups",
    )


@pytest.mark.django_db
def test_reject_needs_a_reason(flow):
    decision = propose(flow)
    events_before = Event.objects.count()

    with pytest.raises(ValidationError) as refused:
        services.decision_reject(decision=decision, actor=flow.reviewer, reason="  ")

    assert list(refused.value.message_dict) == ["reason"]
    assert_unchanged(decision, "proposed", events_before)


@pytest.mark.django_db
def test_an_agent_cannot_reject(flow):
    _, attempt = flow.claimed()
    decision = propose(flow, actor=flow.agent, attempt=attempt)
    events_before = Event.objects.count()

    with pytest.raises(PermissionDenied) as refused:
        services.decision_reject(decision=decision, actor=flow.agent, reason="mine")

    assert refused.value.code == "permission_denied"
    assert_unchanged(decision, "proposed", events_before)


@pytest.mark.django_db
def test_only_a_manager_may_reject_an_amending_decision(flow):
    decision = propose(flow, amendments=[amendment(flow.spec())])
    events_before = Event.objects.count()

    with pytest.raises(PermissionDenied):
        services.decision_reject(decision=decision, actor=flow.reviewer, reason="no")

    assert_unchanged(decision, "proposed", events_before)
    services.decision_reject(decision=decision, actor=flow.manager, reason="no")
    assert Decision.objects.get(pk=decision.pk).state == "rejected"


@pytest.mark.django_db
def test_a_rejected_amendment_leaves_the_spec_alone(flow):
    spec = flow.spec()
    decision = propose(flow, amendments=[amendment(spec)])

    services.decision_reject(decision=decision, actor=flow.manager, reason="too early")

    assert versions(spec) == {1: "accepted"}
    with pytest.raises(Conflict) as refused:
        services.decision_accept(decision=decision, actor=flow.manager)
    assert refused.value.code == "invalid_state"
    assert versions(spec) == {1: "accepted"}


@pytest.mark.django_db
def test_the_agents_task_keeps_its_decisions_after_the_attempt_ends(flow):
    task, attempt = flow.claimed()
    decision = propose(flow, actor=flow.agent, attempt=attempt)

    attempts.attempt_release(attempt=attempt, actor=flow.agent, reason="handing over")
    services.decision_accept(decision=decision, actor=flow.reviewer)

    assert list(task.decisions.values_list("key", "state")) == [("FM-D1", "accepted")]
