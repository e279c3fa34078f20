"""Gates used only by tests that run a real Celery worker (registered via FACTORY_EXTRA_GATES)."""

import time

from evidence.gates import Gate, Verdict


class SlowGate(Gate):
    """Passes after a few seconds: long enough to kill its worker in the middle."""

    description = "Sleeps, then passes."

    def check(self, attempt, params, policy):
        time.sleep(3)
        return Verdict(True, "slept and passed", {"slept": 3})
