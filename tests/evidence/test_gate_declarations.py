"""Gates are asked what they declare, never what they are called.

The runner is the gate that measures the repository, needs a commit and goes first,
whatever name the site registers it under; a gate that happens to be registered as
``runner`` but declares none of it is an ordinary gate.
"""

import pytest
from django.core.exceptions import ValidationError

from events.types import type_of
from evidence import selectors
from evidence.gates import Gate, SpecCurrent
from evidence.models import GateRun
from projects import services as project_services
from projects.errors import Conflict
from projects.models import Event
from projects.policy import declares, measuring_gate_name, registry
from runner.gates import RunnerGate
from tasks import attempts

VERDICT = {"verified": True, "commit": "c0ffee" * 6, "seconds": 1.5, "tests": {"tests": 2}}


@pytest.fixture
def renamed(settings):
    """The site registers its runner as ``measure`` and an ordinary gate as ``runner``."""
    gates = dict(settings.FACTORY_GATES)
    gates["measure"] = gates.pop("runner")
    gates["runner"] = "evidence.gates.SpecCurrent"
    settings.FACTORY_GATES = gates
    registry.cache_clear()
    yield registry()
    registry.cache_clear()


def submit(attempt, change):
    return attempts.attempt_submit(
        attempt=attempt, actor=attempt.agent, summary="done", change=change
    )


def test_only_the_runner_declares_what_it_needs():
    declared = ("goes_first", "needs_commit", "measures_repository")

    assert [getattr(Gate, name) for name in declared] == [False, False, False]
    assert [getattr(SpecCurrent, name) for name in declared] == [False, False, False]
    assert [getattr(RunnerGate, name) for name in declared] == [True, True, True]


def test_the_measuring_gate_is_found_by_what_it_declares(renamed):
    assert measuring_gate_name() == "measure"
    assert (declares("measure", "needs_commit"), declares("runner", "needs_commit")) == (
        True,
        False,
    )
    assert declares("no-such-gate", "goes_first") is False


@pytest.mark.django_db
def test_a_renamed_runner_in_the_policy_still_needs_a_repository(renamed, flow):
    policy, events = flow.project.gate_policy, Event.objects.count()

    with pytest.raises(Conflict) as refused:
        project_services.project_update(
            project=flow.project, actor=flow.manager, gate_policy={"measure": {}}
        )

    assert refused.value.code == "runner_unconfigured"
    assert str(refused.value).startswith("the measure gate needs repository_url")
    flow.project.refresh_from_db()
    assert (flow.project.gate_policy, Event.objects.count()) == (policy, events)


@pytest.mark.django_db
def test_a_gate_called_runner_that_measures_nothing_needs_no_repository(renamed, flow):
    project_services.project_update(
        project=flow.project, actor=flow.manager, gate_policy={"runner": {}}
    )

    flow.project.refresh_from_db()
    assert flow.project.gate_policy == {"runner": {}}


@pytest.mark.django_db
def test_a_renamed_runner_refuses_a_submission_without_a_commit(renamed, flow):
    flow.gates({"measure": {}})
    _, attempt = flow.claimed()
    events = Event.objects.count()

    with pytest.raises(ValidationError) as refused:
        submit(attempt, {"branch": "agent/x"})

    assert list(refused.value.message_dict) == ["change.commit"]
    attempt.refresh_from_db()
    assert (attempt.state, Event.objects.count()) == ("running", events)
    assert GateRun.objects.filter(attempt=attempt).count() == 0


@pytest.mark.django_db
def test_a_gate_called_runner_that_measures_nothing_takes_a_submission_without_a_commit(
    renamed, flow
):
    flow.gates({"runner": {}})
    _, attempt = flow.claimed()

    attempt = submit(attempt, {"branch": "agent/x"})

    assert attempt.state == "checking"
    assert list(GateRun.objects.filter(attempt=attempt).values_list("gate", flat=True)) == [
        "runner"
    ]


@pytest.mark.django_db
def test_the_measured_run_is_the_renamed_runners_with_its_summary(renamed, flow):
    flow.gates({"measure": {}, "runner": {}})
    _, attempt = flow.claimed()
    submit(attempt, {"commit": "abc1230000000000000000000000000000000000"})
    GateRun.objects.filter(attempt=attempt, gate="measure").update(
        state="passed", verdict=VERDICT, summary="verified"
    )

    run, summary = selectors.measured_run(attempt)

    assert run.gate == "measure"
    assert summary == {
        "state": "passed",
        "verified": True,
        "commit": "c0ffee" * 6,
        "seconds": 1.5,
        "summary": "verified",
        "tests": {"tests": 2},
        "steps": [],
        "problems": [],
    }


@pytest.mark.django_db
def test_an_attempt_without_the_measuring_gate_has_no_measured_run(renamed, flow):
    flow.gates({"runner": {}})
    _, attempt = flow.claimed()
    submit(attempt, {})

    assert selectors.measured_run(attempt) == (None, None)


def test_runner_finished_is_the_type_of_the_measuring_gates_verdict(renamed):
    finished = [
        type_of("evidence.gaterun", "succeed", "passed", gate) for gate in ("measure", "runner")
    ]

    assert finished == ["runner.finished", "gate.finished"]


@pytest.mark.django_db
def test_tested_criteria_are_those_a_test_selector_proves(flow):
    spec = flow.spec()
    _, attempt = flow.claimed(spec=spec)

    assert selectors.tested_criteria(attempt) == {"AC-1": "tests/test_claim.py::*"}
