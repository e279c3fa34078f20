"""seed_demo: the demo it leaves, made once for the module (it runs pytest and coverage in
subprocesses, and the runner in its sandbox) and rolled back to after every test."""

import io
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import override_settings

from decisions.models import Decision, Spec, SpecVersion
from evidence.models import Evidence, GateRun
from projects.models import Event, Membership
from tasks.models import Attempt, Task
from tests.conftest import module_media, open_to_the_sandbox, world_for_the_module

User = get_user_model()
# The runner demo runs the sandbox: KINDS in tests/conftest.py puts this module in the xdist
# group "machine", so its tests also share one worker and one demo.
pytestmark = pytest.mark.django_db


def run(*args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def _isolated_media(tmp_path_factory):
    """One media folder for the module: the demo's evidence outlives a test."""
    with module_media(tmp_path_factory):
        yield


@pytest.fixture(scope="module")
def _isolated_runner_root(tmp_path_factory):
    """The runner demo's repository, mirror and workspaces, for the module."""
    root = open_to_the_sandbox(tmp_path_factory.mktemp("runner-root")) / "runner"
    with override_settings(FACTORY_RUNNER_ROOT=root):
        yield


@pytest.fixture(scope="module")
def seeded(django_db_setup, django_db_blocker, _isolated_media, _isolated_runner_root):
    """``seed_demo``'s output (out, err), run once; every test is rolled back to its demo."""
    with world_for_the_module(django_db_blocker, lambda: run("seed_demo")) as output:
        yield output


DEMO_TASK_STATES = {
    "draft",
    "ready",
    "claimed",
    "in_review",
    "done",
    "blocked",
    "failed",
    "cancelled",
}
DEMO_EVIDENCE_KINDS = {"junit", "diff", "log", "screenshot", "coverage"}
MODELS = [Task, Attempt, Event, Evidence, Decision, Spec, SpecVersion, GateRun, User, Membership]


def counts() -> dict[str, int]:
    return {model.__name__: model.objects.count() for model in MODELS}


def test_seed_demo_leaves_the_history_real_use_leaves(seeded):
    out, _ = seeded

    assert "Demo project FM created." in out
    assert set(Task.objects.values_list("state", flat=True)) >= DEMO_TASK_STATES
    claim_spec = Spec.objects.get(key="FM-S1")
    assert dict(claim_spec.versions.values_list("number", "state")) == {
        1: "superseded",
        2: "accepted",
    }
    assert claim_spec.current_version().source_decision.state == "accepted"
    chain = Decision.objects.filter(state="superseded", superseded_by__state="superseded")
    assert chain.exists()
    assert Decision.objects.filter(state="rejected").exclude(verdict_reason="").exists()
    assert Attempt.objects.filter(
        state="failed", gate_runs__state="failed", end_reason__startswith="gates failed — "
    ).exists()
    assert Attempt.objects.filter(state="rejected").exclude(end_reason="").exists()
    assert set(Evidence.objects.values_list("kind", flat=True)) >= DEMO_EVIDENCE_KINDS
    assert set(Evidence.objects.values_list("provenance", flat=True)) == {
        "agent",
        "verifier",
        "runner",
        "gate",
    }


def test_seed_demo_shows_one_attempt_the_runner_verified_and_one_false_claim_it_caught(seeded):
    honest, false_claim = Task.objects.filter(project__slug="RD").order_by("number")[:2]
    assert (honest.state, false_claim.state) == ("in_review", "ready")
    verified = GateRun.objects.get(attempt__task=honest, gate="runner")
    assert verified.summary.startswith("verified at ")
    caught = GateRun.objects.get(attempt__task=false_claim, gate="runner")
    assert caught.state == "failed"
    assert "test_claim_skips_tasks_with_open_dependencies" in caught.summary
    assert GateRun.objects.get(attempt__task=false_claim, gate="tests-pass").verdict[
        "set_aside"
    ] == list(
        Evidence.objects.filter(attempt__task=false_claim, provenance="agent").values_list(
            "pk", flat=True
        )
    )


def test_seed_demo_lands_one_change_and_shows_one_that_came_back_from_the_merge_queue(seeded):
    renamed, fairness = Task.objects.filter(project__slug="RD").order_by("number")[2:]
    assert (renamed.state, fairness.state) == ("done", "ready")
    assert len(renamed.landed_commit) == 40
    came_back = fairness.attempts.get()
    assert came_back.landing["state"] == "failed"
    assert came_back.landing["with"] == [renamed.key]
    assert came_back.landing["failing"] == [
        "tests/test_fairness.py::FairnessTest::test_equal_priorities_go_oldest_first"
    ]


def test_seed_demo_stores_real_evidence_once_and_a_second_run_adds_nothing(seeded):
    junit = {e.summary["failed"] for e in Evidence.objects.filter(kind="junit")}
    media = Path(settings.MEDIA_ROOT)
    files = [p for p in media.rglob("*") if p.is_file()]
    assert junit == {0, 1}
    assert len(files) == Evidence.objects.values("sha256").distinct().count()
    assert Evidence.objects.get(
        kind="screenshot", attempt__task__key="FM-1", attempt__number=3
    ).summary == {
        "format": "png",
        "width": 720,
        "height": 300,
    }

    before = counts()
    out, _ = run("seed_demo")

    assert out == "The demo project FM exists already; nothing added.\n"
    assert counts() == before
    assert len([p for p in media.rglob("*") if p.is_file()]) == len(files)
