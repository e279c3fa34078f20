"""Flaky tests in the real sandbox: a test that fails at odd runs and passes at even ones.

The project's setup step counts the runs in the lander's dependency cache (writable in
setup, read-only in the test step, kept between runs: ``runner.cache``); ``tests/test_coin.py``
fails when the count is odd. So the first run of any tree fails by it and the second
passes, at the same tree: the flakiness is real (two sandboxed runs of one commit, their
own JUnit reports), and the order is certain.
"""

from landing.lander import land
from landing.models import Batch, FlakyTest
from projects import services as project_services
from tests.landing.conftest import VERIFY, feature

COIN = "tests/test_coin.py::CoinTest::test_coin"
COUNT = """\
import pathlib

runs = pathlib.Path("/cache/runs")
runs.write_text(str(int(runs.read_text()) + 1 if runs.exists() else 1))
"""
COIN_TEST = """\
import pathlib
import unittest


class CoinTest(unittest.TestCase):
    def test_coin(self):
        self.assertEqual(int(pathlib.Path("/cache/runs").read_text()) % 2, 0)
"""


def counting(flow, origin):
    origin.person_pushes({"count.py": COUNT})
    project_services.project_update(
        project=flow.project,
        actor=flow.manager,
        verify={**VERIFY, "setup": ["python3 count.py"], "cache_keys": ["count.py"]},
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
