"""Time limits that heal (issue 34, item 4): a change whose batches keep ending without a
verdict goes back once the target alone verifies cleanly, rather than holding the queue."""

from landing.lander import land
from landing.models import Batch, BatchState
from landing.settling import settle_dead_batches
from tasks.landing import attempt_landing_note
from tests.landing.conftest import broken, feature


def died_verifying(flow, task, attempt) -> Batch:
    """A batch as a lander SIGKILLed while verifying leaves it, ``attempt`` first."""
    dead = Batch.objects.create(
        project=flow.project,
        state=BatchState.VERIFYING,
        target="main",
        method="squash",
        changes=[{"attempt": attempt.pk, "task": task.key, "commit": attempt.landing["commit"]}],
    )
    attempt_landing_note(attempt=attempt, state="landing", batch=dead.pk, reason="")
    return dead


def test_each_batch_a_lander_died_in_counts_against_its_first_change(queue, origin, flow):
    task, attempt = queue.approved(feature("alpha"), branch="alpha")
    for expected in (1, 2):
        died_verifying(flow, task, attempt)
        settle_dead_batches(flow.project)
        attempt.refresh_from_db()
        assert (attempt.landing["state"], attempt.landing["errors"]) == ("queued", expected)


def test_a_change_that_kept_its_batches_from_a_verdict_goes_back_and_the_rest_land(
    queue, origin, flow, script, settings
):
    settings.FACTORY_LANDING_HEAD_ERRORS = 3
    hang, hang_attempt = queue.approved(feature("hang"), branch="hang")
    alpha, _ = queue.approved(feature("alpha"), branch="alpha")
    for _ in range(3):
        died_verifying(flow, hang, hang_attempt)
        settle_dead_batches(flow.project)

    land(flow.project)

    hang.refresh_from_db()
    alpha.refresh_from_db()
    hang_attempt.refresh_from_db()
    assert (hang.state, alpha.state) == ("ready", "done")
    assert hang_attempt.landing["state"] == "failed"
    assert hang_attempt.landing["reason"].startswith(
        "landing failed: its batches ended 3 times in a row without a verdict while main alone "
        "passes at "
    )
    assert "hang.py" not in origin.files(origin.tip())


def test_below_the_count_the_change_is_verified_as_usual(queue, origin, flow, script, settings):
    settings.FACTORY_LANDING_HEAD_ERRORS = 3
    task, attempt = queue.approved(feature("alpha"), branch="alpha")
    for _ in range(2):
        died_verifying(flow, task, attempt)
        settle_dead_batches(flow.project)

    land(flow.project)

    task.refresh_from_db()
    attempt.refresh_from_db()
    assert task.state == "done"


def test_a_red_target_returns_nobody_however_often_the_head_erred(
    queue, origin, flow, script, settings
):
    settings.FACTORY_LANDING_HEAD_ERRORS = 1
    task, attempt = queue.approved(feature("alpha"), branch="alpha")
    origin.person_pushes(broken("zeta"))
    died_verifying(flow, task, attempt)
    settle_dead_batches(flow.project)

    land(flow.project)

    task.refresh_from_db()
    attempt.refresh_from_db()
    assert task.state == "approved"
    assert attempt.landing["state"] == "error"
    assert "the target itself fails its tests" in attempt.landing["reason"]
    assert attempt.landing["errors"] == 2  # this batch erred too, with it first


def test_a_batch_that_reached_a_verdict_ends_the_count(queue, origin, flow, script):
    # gamma waits behind the culprit for the next batch: its count starts again there.
    queue.approved(feature("alpha"), branch="alpha")
    queue.approved(broken("beta"), branch="beta")
    _, behind_attempt = queue.approved(feature("gamma"), branch="gamma")
    attempt_landing_note(attempt=behind_attempt, errors=2)

    land(flow.project)

    behind_attempt.refresh_from_db()
    assert behind_attempt.landing.get("errors", 0) == 0
