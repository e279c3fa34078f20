"""Parallel verification where there is room (issue 34, item 5): the prefixes a bisection
may need next are verified beside the one it needs now; the outcome is the same as one at a
time, and every extra run is counted."""

import threading
import time

import pytest

from evidence.models import GateRun
from landing.lander import land
from landing.models import Batch
from landing.verifying import bisection_points
from tests.landing.conftest import broken, feature


def test_the_points_a_bisection_may_need_come_nearest_first():
    assert bisection_points(0, 8) == [4, 2, 6, 1, 3, 5, 7, 0]
    assert bisection_points(4, 8) == [6, 5, 7]
    assert bisection_points(0, 1) == [0]
    assert bisection_points(3, 4) == []


class Overlap:
    """Wraps the scripted runner: how many runs were in the sandbox at once, at most."""

    def __init__(self, script):
        self.script, self.now, self.most = script, 0, 0
        self.lock = threading.Lock()

    def __call__(self, **kwargs):
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            time.sleep(0.2)  # long enough for the runs started together to meet
            with self.lock:
                return self.script(**kwargs)
        finally:
            with self.lock:
                self.now -= 1


@pytest.fixture
def overlap(script, monkeypatch):
    watched = Overlap(script)
    monkeypatch.setattr("landing.verifying.verify_tree", watched)
    return watched


def eight_with_a_culprit(queue):
    tasks = []
    for n in range(8):
        name = f"f{n}"
        files = broken(name) if n == 5 else feature(name)
        tasks.append(queue.approved(files, branch=name)[0])
    return tasks


@pytest.mark.parametrize("parallel", [1, 4])
def test_one_culprit_in_eight_lands_the_seven_others_however_many_run_at_once(
    queue, origin, flow, overlap, settings, parallel
):
    settings.FACTORY_LANDING_VERIFY_PARALLEL = parallel
    queue.on(batch_max=8)
    tasks = eight_with_a_culprit(queue)

    land(flow.project)

    for task in tasks:
        task.refresh_from_db()
    assert [t.state for t in tasks] == ["done"] * 5 + ["ready"] + ["done"] * 2
    first = Batch.objects.order_by("pk").first()
    assert [c["outcome"] for c in first.changes][:6] == ["landed"] * 5 + ["failed"]
    if parallel == 1:
        assert (overlap.most, first.speculative_unused) == (1, 0)
    else:
        assert 1 < overlap.most <= parallel
        # Every run is counted: those read and those started ahead that nobody needed.
        assert first.verify_runs >= first.reruns + first.bisect_steps + 1


def test_nothing_is_run_ahead_while_a_submission_waits_for_the_runner(
    queue, origin, flow, overlap, settings
):
    settings.FACTORY_LANDING_VERIFY_PARALLEL = 4
    queue.on(batch_max=8)
    eight_with_a_culprit(queue)
    _, waiting = queue.in_review(feature("later"), branch="later")
    GateRun.objects.create(attempt=waiting, gate="runner", state="queued")

    land(flow.project)

    assert overlap.most == 1
    assert Batch.objects.order_by("pk").first().speculative_unused == 0
