"""Flaky tests in the real sandbox, at the lander: a test that fails at odd runs and passes
at even ones (``tests.coin``)."""

from landing.lander import land
from landing.models import Batch, FlakyTest
from projects import services as project_services
from tests.coin import COIN, COIN_TEST, COUNT, COUNTING
from tests.landing.conftest import VERIFY, feature


def counting(flow, origin):
    origin.person_pushes({"count.py": COUNT})
    project_services.project_update(
        project=flow.project,
        actor=flow.manager,
        verify={**VERIFY, **COUNTING},
    )


def test_someone_elses_flaky_test_blames_nobody_and_the_change_lands(queue, origin, flow):
    counting(flow, origin)
    origin.person_pushes({"tests/test_coin.py": COIN_TEST})
    alpha, _ = queue.approved(feature("alpha"), branch="alpha")

    land(flow.project)

    alpha.refresh_from_db()
    assert alpha.state == "done"
    batch = Batch.objects.get(project=flow.project)
    assert (batch.verify_runs, batch.reruns, batch.flaky) == (2, 1, [COIN])
    assert FlakyTest.objects.get(project=flow.project).test == COIN


def test_a_change_whose_own_test_is_flaky_goes_back_and_the_other_lands(queue, origin, flow):
    counting(flow, origin)
    alpha, _ = queue.approved(feature("alpha"), branch="alpha")
    coin, coin_attempt = queue.approved({"tests/test_coin.py": COIN_TEST}, branch="coin")

    land(flow.project)

    alpha.refresh_from_db()
    coin.refresh_from_db()
    coin_attempt.refresh_from_db()
    assert (alpha.state, coin.state) == ("done", "ready")
    assert coin_attempt.landing["flaky"] == [COIN]
    assert "tests/test_coin.py" not in origin.files(origin.tip())
    assert "alpha.py" in origin.files(origin.tip())
