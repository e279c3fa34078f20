"""Flaky tests blame nobody (issue 34, item 1; docs/landing.md, "Flaky tests").

The lander builds real commits in a real mirror; the runner is a script (``Script``) that
answers each tree with a JUnit report in which chosen tests fail at chosen runs, so a test
can fail at one run and pass at the next, at the same tree, on purpose. What reached
``main`` is read back with git. ``tests/landing/test_flaky_sandbox.py`` has the same rules
in the real sandbox.
"""

import pytest
from django.core.exceptions import ValidationError

from landing.lander import land
from landing.models import Batch, FlakyTest
from landing.services import landing_quarantine
from projects import services as project_services
from projects.errors import Conflict, PermissionDenied
from projects.models import Event
from tests.landing.conftest import broken, feature

CALC_ADD = "tests/test_calc.py::CalcTest::test_add"


def id_of(name: str) -> str:
    """The id the JUnit of ``feature(name)``'s test gets."""
    return f"tests/test_{name}.py::{name.title()}Test::test_{name}"


def once(n: int) -> bool:
    return n == 1


def always(n: int) -> bool:
    return True


def test_a_test_that_fails_then_passes_at_one_tree_blames_nobody_and_the_batch_lands(
    queue, origin, flow, script
):
    script.fails[CALC_ADD] = once
    alpha, _ = queue.approved(feature("alpha"), branch="alpha")
    beta, _ = queue.approved(feature("beta"), branch="beta")

    counts = land(flow.project)

    assert (counts["landed"], counts["returned"]) == (2, 0)
    alpha.refresh_from_db()
    beta.refresh_from_db()
    assert (alpha.state, beta.state) == ("done", "done")
    batch = Batch.objects.get(project=flow.project)
    assert (batch.verify_runs, batch.reruns, batch.flaked, batch.flaky) == (2, 1, 1, [CALC_ADD])
    row = FlakyTest.objects.get(project=flow.project)
    tree = origin._git(origin.bare, "rev-parse", f"{origin.tip()}^{{tree}}")
    assert (row.test, row.flakes, row.trees, row.quarantined) == (CALC_ADD, 1, [tree], False)
    assert row.first_seen == row.last_seen is not None


def twice(n: int) -> bool:
    return n <= 2


def test_someone_elses_test_failing_at_both_runs_of_the_tree_that_would_blame_blames_nobody(
    queue, origin, flow, script
):
    # calc's test (in the base, no change's) fails twice at the whole chain, one run in
    # 400 for a test that flakes one in twenty: beta's tree would blame beta, so it is run
    # a third time first; calc passes there and both changes land.
    script.fails[CALC_ADD] = twice
    alpha, _ = queue.approved(feature("alpha"), branch="alpha")
    beta, _ = queue.approved(feature("beta"), branch="beta")

    counts = land(flow.project)

    assert (counts["landed"], counts["returned"]) == (2, 0)
    alpha.refresh_from_db()
    beta.refresh_from_db()
    assert (alpha.state, beta.state) == ("done", "done")
    assert origin._git(origin.bare, "log", "--format=%s", "-2", "main").splitlines() == [
        "FM-2: Add beta",
        "FM-1: Add alpha",
    ]
    # The whole chain twice, alpha's prefix once, the whole chain's confirming run.
    batch = Batch.objects.get(project=flow.project)
    assert (batch.verify_runs, batch.reruns, batch.bisect_steps) == (4, 2, 1)
    assert (batch.flaked, batch.flaky) == (1, [CALC_ADD])
    row = FlakyTest.objects.get(project=flow.project)
    assert (row.test, row.flakes) == (CALC_ADD, 1)


def test_a_flake_that_misled_the_bisection_is_passed_over_and_the_real_culprit_blamed(
    queue, origin, flow, script
):
    # calc's test fails at its first four runs: twice at the whole chain (which gamma
    # breaks anyway) and twice at alpha's prefix, which would blame alpha; the base passes,
    # alpha's prefix passes its confirming run, and the search goes on above it to gamma.
    script.fails[CALC_ADD] = lambda n: n <= 4
    alpha, _ = queue.approved(feature("alpha"), branch="alpha")
    _, gamma_attempt = queue.approved(broken("gamma"), branch="gamma")

    land(flow.project)

    alpha.refresh_from_db()
    gamma_attempt.refresh_from_db()
    assert alpha.state == "done"
    assert gamma_attempt.landing["state"] == "failed"
    assert gamma_attempt.landing["failing"] == [id_of("gamma")]
    assert CALC_ADD not in gamma_attempt.landing["reason"]
    # The chain twice, alpha's prefix twice, the base, alpha's and the chain's confirmations.
    batch = Batch.objects.get(project=flow.project)
    assert (batch.verify_runs, batch.bisect_steps, batch.flaky) == (7, 1, [CALC_ADD])


def test_a_change_whose_own_test_flakes_is_held_and_the_others_land(queue, origin, flow, script):
    script.fails[id_of("beta")] = once
    alpha, _ = queue.approved(feature("alpha"), branch="alpha")
    beta, beta_attempt = queue.approved(feature("beta"), branch="beta")
    gamma, _ = queue.approved(feature("gamma"), branch="gamma")

    land(flow.project)

    for task in (alpha, beta, gamma):
        task.refresh_from_db()
    beta_attempt.refresh_from_db()
    assert (alpha.state, beta.state, gamma.state) == ("done", "ready", "done")
    assert beta_attempt.landing["state"] == "failed"
    assert beta_attempt.landing["flaky"] == [id_of("beta")]
    assert "a test this change adds or edits is flaky" in beta_attempt.landing["reason"]
    assert id_of("beta") in beta_attempt.landing["reason"]
    assert "beta.py" not in origin.files(origin.tip())
    assert {"alpha.py", "gamma.py"} <= set(origin.files(origin.tip()))


def test_a_culprit_is_blamed_only_for_tests_that_failed_at_every_run(queue, origin, flow, script):
    # calc's test fails at its first run only (at the whole chain); gamma's own test always.
    script.fails[CALC_ADD] = once
    alpha, _ = queue.approved(feature("alpha"), branch="alpha")
    _, gamma_attempt = queue.approved(broken("gamma"), branch="gamma")

    land(flow.project)

    alpha.refresh_from_db()
    gamma_attempt.refresh_from_db()
    assert alpha.state == "done"
    assert gamma_attempt.landing["state"] == "failed"
    assert gamma_attempt.landing["failing"] == [id_of("gamma")]
    assert CALC_ADD not in gamma_attempt.landing["reason"]
    # The whole chain failed twice (gamma's test both times, calc's once); alpha's prefix
    # passed at once: gamma's failure was seen twice at its prefix, and a third time
    # before it was blamed.
    batch = Batch.objects.get(project=flow.project)
    assert batch.flaky == [CALC_ADD]
    assert (batch.verify_runs, batch.reruns, batch.bisect_steps) == (4, 2, 1)


def test_a_quarantined_tests_failures_neither_block_nor_blame(queue, origin, flow, script):
    landing_quarantine(
        project=flow.project,
        actor=flow.manager,
        test=CALC_ADD,
        quarantined=True,
        reason="fails on leap days; FM-99 fixes it",
    )
    script.fails[CALC_ADD] = always
    alpha, _ = queue.approved(feature("alpha"), branch="alpha")

    land(flow.project)

    alpha.refresh_from_db()
    assert alpha.state == "done"
    batch = Batch.objects.get(project=flow.project)
    assert (batch.verify_runs, batch.reruns, batch.flaky) == (1, 0, [])
    assert FlakyTest.objects.get(test=CALC_ADD).passes == 0


def test_an_own_test_made_flaky_on_purpose_lands_only_once_a_manager_quarantined_it(
    queue, origin, flow, script
):
    # The agent's own test fails at one run and passes at the next: without a quarantine
    # it is held (above); a manager who quarantines it takes that responsibility.
    script.fails[id_of("sly")] = once
    landing_quarantine(
        project=flow.project,
        actor=flow.manager,
        test=id_of("sly"),
        quarantined=True,
        reason="known flaky; the team owns it",
    )
    sly, _ = queue.approved(feature("sly"), branch="sly")

    land(flow.project)

    sly.refresh_from_db()
    assert sly.state == "done"


def test_an_own_test_flaked_on_purpose_never_counts_toward_the_projects_quarantine(
    queue, origin, flow, script
):
    # Were it counted, an agent could submit its coin-toss test until the project's rule
    # quarantined it, and then land it.
    queue.on(quarantine_after=1)
    script.fails[id_of("sly")] = once
    sly, sly_attempt = queue.approved(feature("sly"), branch="sly")

    land(flow.project)

    sly.refresh_from_db()
    sly_attempt.refresh_from_db()
    assert (sly.state, sly_attempt.landing["flaky"]) == ("ready", [id_of("sly")])
    assert not FlakyTest.objects.exists()
    assert Batch.objects.get(project=flow.project).flaky == [id_of("sly")]  # still shown


def test_the_project_quarantines_after_n_flakes_and_releases_after_m_passes(
    queue, origin, flow, script
):
    queue.on(quarantine_after=1, release_after=2)
    script.fails[CALC_ADD] = once
    queue.approved(feature("alpha"), branch="alpha")
    land(flow.project)
    row = FlakyTest.objects.get(test=CALC_ADD)
    assert (row.quarantined, row.quarantined_by, row.flakes) == (True, None, 1)
    quarantine = Event.objects.get(transition="quarantine")
    assert (quarantine.actor, quarantine.extra["test"]) == (None, CALC_ADD)

    queue.approved(feature("beta"), branch="beta")
    land(flow.project)
    assert FlakyTest.objects.get(test=CALC_ADD).passes == 1
    queue.approved(feature("gamma"), branch="gamma")
    land(flow.project)

    row.refresh_from_db()
    assert (row.quarantined, row.passes) == (False, 0)
    release = Event.objects.get(transition="release")
    assert release.reason == "passed 2 runs in a row"


# --- A manager's quarantine ------------------------------------------------------------------


def test_a_manager_quarantines_and_releases_a_test_with_an_event_each(flow):
    row = landing_quarantine(
        project=flow.project, actor=flow.manager, test=CALC_ADD, quarantined=True, reason="flaky"
    )
    assert (row.quarantined, row.quarantined_by, row.reason) == (True, flow.manager, "flaky")
    landing_quarantine(project=flow.project, actor=flow.manager, test=CALC_ADD, quarantined=False)
    row.refresh_from_db()
    assert (row.quarantined, row.quarantined_by, row.quarantined_at) == (False, None, None)
    events = list(Event.objects.filter(object_key=CALC_ADD).values_list("transition", "actor"))
    assert events == [("quarantine", flow.manager.pk), ("release", flow.manager.pk)]


@pytest.mark.parametrize(
    "test, quarantined, reason, refusal",
    [
        ("", True, "why", "test"),
        ("a" * 501, True, "why", "test"),
        ("tests/x.py::T::a\nb", True, "why", "test"),
        (CALC_ADD, True, "  ", "reason"),
    ],
)
def test_a_bad_quarantine_is_refused_and_changes_nothing(flow, test, quarantined, reason, refusal):
    with pytest.raises(ValidationError) as refused:
        landing_quarantine(
            project=flow.project,
            actor=flow.manager,
            test=test,
            quarantined=quarantined,
            reason=reason,
        )
    assert refusal in refused.value.message_dict
    assert (FlakyTest.objects.count(), Event.objects.filter(transition="quarantine").count()) == (
        0,
        0,
    )


def test_quarantining_twice_or_releasing_a_free_test_is_409_and_changes_nothing(flow):
    landing_quarantine(
        project=flow.project, actor=flow.manager, test=CALC_ADD, quarantined=True, reason="x"
    )
    events = Event.objects.count()
    with pytest.raises(Conflict) as twice:
        landing_quarantine(
            project=flow.project, actor=flow.manager, test=CALC_ADD, quarantined=True, reason="y"
        )
    with pytest.raises(Conflict) as free:
        landing_quarantine(
            project=flow.project, actor=flow.manager, test="tests/other.py::t", quarantined=False
        )
    assert (twice.value.code, free.value.code) == ("already_quarantined", "not_quarantined")
    assert Event.objects.count() == events
    assert FlakyTest.objects.get().reason == "x"


def test_only_a_manager_quarantines(flow):
    with pytest.raises(PermissionDenied):
        landing_quarantine(
            project=flow.project, actor=flow.reviewer, test=CALC_ADD, quarantined=True, reason="x"
        )
    assert FlakyTest.objects.count() == 0


def test_the_quarantine_settings_are_checked_like_every_landing_setting(flow):
    with pytest.raises(ValidationError) as refused:
        project_services.project_update(
            project=flow.project,
            actor=flow.manager,
            landing={"mode": "off", "quarantine_after": -1, "release_after": 0},
        )
    assert set(refused.value.message_dict) == {"landing.quarantine_after", "landing.release_after"}
