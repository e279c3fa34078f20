"""A gate for the worker-kill proof: slow enough that a SIGKILL lands mid-gate."""

import time

from evidence.gates import Gate, Verdict


class SleepGate(Gate):
    description = "Sleeps a moment, then passes."
    params = {"seconds": (float, 0.5)}

    def check(self, attempt, params, policy):
        seconds = self.clean_params(params)["seconds"]
        time.sleep(seconds)
        return Verdict(True, f"slept {seconds} s", {"slept": seconds})
