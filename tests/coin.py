"""A test that fails at odd runs and passes at even ones, in the real sandbox.

The project's setup step (``COUNT``, run as ``python3 count.py`` with ``count.py`` as the
cache key) counts the runs in its dependency cache, which setup may write and the test
step only read and which is kept between runs (``runner.cache``); ``COIN_TEST`` fails
when the count is odd. So the first run of any tree fails by ``COIN`` and the second
passes, at the same tree: a real flake in two sandboxed runs, in a certain order.
"""

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
# The verify block's additions that count the runs.
COUNTING = {"setup": ["python3 count.py"], "cache_keys": ["count.py"]}
