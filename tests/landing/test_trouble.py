"""The lander on a bad day, on real git repositories and the real sandbox: a report it
cannot read, an error it did not foresee, a target that fails on its own, and a manager's
dequeue at the wrong moment. No input stops the queue (docs/landing.md, "A bad day").
"""

import shutil
import subprocess
from datetime import timedelta

from django.utils import timezone

from landing import lander as lander_module
from landing import verifying
from landing.lander import land, land_batch
from landing.locks import lander_lock
from landing.models import Batch, BatchState, Lander
from projects.models import Event
from tasks.landing import attempt_landing_note, landing_queue, task_dequeue
from tests.landing.conftest import broken, feature, lander_at_work, snapshot


def unreadable(name: str) -> dict:
    """A change whose test fails with a control character in its message: the suite's
    runner writes it into the JUnit report as it is, which no XML parser reads."""
    files = feature(name)
    files[f"tests/test_{name}.py"] = files[f"tests/test_{name}.py"].replace(
        f"self.assertEqual({name}(), {name!r})", "self.fail('a control character: \\x01')"
    )
    return files


def dead_batch(flow, *attempts) -> Batch:
    """A batch whose lander died while verifying it: its changes marked landing."""
    batch = Batch.objects.create(
        project=flow.project,
        state=BatchState.VERIFYING,
        target="main",
        method="squash",
        changes=[
            {"attempt": a.pk, "task": a.task.key, "commit": a.landing["commit"]} for a in attempts
        ],
    )
    for attempt in attempts:
        attempt_landing_note(attempt=attempt, state="landing", batch=batch.pk, reason="")
    return batch


def dequeue(api, flow, task, to="ready", reason="not now"):
    return api(flow.manager).post(
        f"/api/v1/projects/{flow.project.slug}/landing/{task.key}/dequeue/",
        {"to": to, "reason": reason},
        format="json",
    )


# --- a report it cannot read, an error it did not foresee -----------------------------------


def test_an_unreadable_junit_fails_its_run_and_its_culprit_comes_back_naming_it(
    queue, origin, flow
):
    first, _ = queue.approved(feature("alpha"), branch="alpha")
    culprit, culprit_attempt = queue.approved(unreadable("beta"), branch="beta")
    later, _ = queue.approved(feature("gamma"), branch="gamma")

    counts = land(flow.project)

    assert (counts["batches"], counts["landed"], counts["returned"]) == (2, 2, 1)
    first.refresh_from_db(), culprit.refresh_from_db(), later.refresh_from_db()
    assert (first.state, culprit.state, later.state) == ("done", "ready", "done")
    culprit_attempt.refresh_from_db()
    assert culprit_attempt.landing["state"] == "failed"
    assert (
        "its JUnit report cannot be read: the junit file is not well-formed XML"
        in (culprit_attempt.landing["reason"])
    )
    batch = Batch.objects.order_by("pk").first()
    assert batch.state == BatchState.LANDED
    # The chain (twice: a failure is seen twice before it counts), then two bisect steps,
    # the failing one twice and a third time before it blames: every run counted.
    assert (batch.verify_runs, batch.reruns, batch.bisect_steps) == (6, 3, 2)


def test_an_error_nobody_foresaw_ends_the_batch_as_error_and_a_manager_can_dequeue(
    queue, origin, flow, api, monkeypatch
):
    task, attempt = queue.approved(feature("alpha"), branch="alpha")

    def full_disk(**kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(verifying, "verify_tree", full_disk)

    counts = land(flow.project)

    batch = Batch.objects.get()
    assert (counts["landed"], batch.state) == (0, BatchState.ERROR)
    assert batch.reason == "nothing landed: OSError: [Errno 28] No space left on device"
    attempt.refresh_from_db()
    assert (attempt.landing["state"], attempt.landing["reason"]) == ("error", batch.reason)
    assert dequeue(api, flow, task).status_code == 200
    task.refresh_from_db()
    assert task.state == "ready"


def test_a_push_whose_answer_was_lost_is_settled_from_the_target(queue, origin, flow, monkeypatch):
    task, _ = queue.approved(feature("alpha"), branch="alpha")
    real_push = lander_module.git.push

    def push_then_lose_the_answer(*args, **kwargs):
        real_push(*args, **kwargs)
        raise subprocess.TimeoutExpired(["git", "push"], 600)

    monkeypatch.setattr(lander_module.git, "push", push_then_lose_the_answer)

    land(flow.project)

    batch = Batch.objects.get()
    assert (batch.state, batch.result) == (BatchState.LANDED, origin.tip())
    assert batch.reason.startswith("landed, settled from the target after: TimeoutExpired: ")
    task.refresh_from_db()
    assert (task.state, task.landed_commit) == ("done", origin.tip())


def test_a_push_that_failed_unforeseen_before_the_target_is_an_error(
    queue, origin, flow, monkeypatch
):
    task, attempt = queue.approved(feature("alpha"), branch="alpha")

    def hang(*args, **kwargs):
        raise subprocess.TimeoutExpired(["git", "push"], 600)

    monkeypatch.setattr(lander_module.git, "push", hang)

    land(flow.project)

    batch = Batch.objects.get()
    assert batch.state == BatchState.ERROR
    assert batch.reason.startswith(
        "nothing landed: its push did not reach the target: TimeoutExpired: "
    )
    task.refresh_from_db(), attempt.refresh_from_db()
    assert (task.state, attempt.landing["state"], origin.tip()) == (
        "approved",
        "error",
        origin.base,
    )


def test_a_manager_dequeues_a_change_whose_lander_died_mid_batch(queue, origin, flow, api):
    task, attempt = queue.approved(feature("alpha"), branch="alpha")
    other, _ = queue.approved(feature("beta"), branch="beta")
    batch = dead_batch(flow, attempt)

    answer = dequeue(api, flow, task, reason="the lander died holding it")

    assert answer.status_code == 200
    assert answer.json()["state"] == "ready"
    batch.refresh_from_db()
    assert (batch.state, batch.reason) == (
        BatchState.ABANDONED,
        "its lander stopped before pushing; its changes stay queued",
    )
    attempt.refresh_from_db()
    assert (attempt.landing["state"], attempt.landing["reason"]) == (
        "dequeued",
        "the lander died holding it",
    )
    assert land(flow.project)["landed"] == 1
    other.refresh_from_db()
    assert other.state == "done"
    assert "alpha.py" not in origin.files(origin.tip())


def test_a_dequeue_while_a_live_lander_lands_the_change_is_refused_and_changes_nothing(
    queue, origin, flow, api
):
    task, attempt = queue.approved(feature("alpha"), branch="alpha")
    batch = dead_batch(flow, attempt)
    before = snapshot(task)

    with lander_at_work(flow.project.pk):
        answer = dequeue(api, flow, task)

    assert answer.status_code == 409
    assert answer.json()["code"] == "landing_in_progress"
    assert snapshot(task) == before
    batch.refresh_from_db()
    assert batch.state == BatchState.VERIFYING


# --- a dequeue between reading the queue and taking it ---------------------------------------


def test_a_change_dequeued_after_the_lander_read_the_queue_is_dropped_not_landed(
    queue, origin, flow
):
    project = queue.on()
    kept, _ = queue.approved(feature("alpha"), branch="alpha")
    gone, gone_attempt = queue.approved(feature("beta"), branch="beta")
    read = list(landing_queue(project.pk)[:4])
    task_dequeue(task=gone, actor=flow.manager, to="ready", reason="not this one")

    with lander_lock(project.pk):  # as ``land`` holds it: the push checks it is held
        batch = land_batch(project, read)

    assert [c["task"] for c in batch.changes] == [kept.key]
    assert batch.changes[0]["outcome"] == "landed"
    assert "beta.py" not in origin.files(origin.tip())
    gone.refresh_from_db(), gone_attempt.refresh_from_db()
    assert (gone.state, gone_attempt.landing["state"]) == ("ready", "dequeued")
    assert not Event.objects.filter(task=gone, transition="land").exists()


# --- a target that fails on its own ------------------------------------------------------------


def test_a_red_target_is_verified_once_per_tip_and_head_then_the_lander_backs_off(
    queue, origin, flow
):
    _, attempt = queue.approved(feature("alpha"), branch="alpha")
    red = origin.person_pushes(broken("zeta"))

    first = land(flow.project)
    again = land(flow.project)

    batch = Batch.objects.get()
    # The change's tree and the target's, each twice: a failure is seen twice to count.
    assert (batch.state, batch.verify_runs, batch.reruns) == (BatchState.ERROR, 4, 2)
    assert (first["batches"], again["batches"]) == (1, 0)
    assert again.get("backing_off") is True
    lander = Lander.objects.get(project=flow.project)
    assert (lander.state, lander.tip, lander.head_id) == ("backing_off", red, attempt.pk)
    assert (lander.verified, lander.batch_id, lander.reason) == (True, batch.pk, batch.reason)
    assert Event.objects.filter(transition="back_off").count() == 1


def test_a_backed_off_lander_looks_at_the_target_later_and_later_without_verifying(
    queue, origin, flow
):
    queue.approved(feature("alpha"), branch="alpha")
    origin.person_pushes(broken("zeta"))
    land(flow.project)
    first_look = Lander.objects.get().wake_at

    Lander.objects.update(wake_at=timezone.now() - timedelta(seconds=1))  # its time came
    counts = land(flow.project)

    lander = Lander.objects.get()
    assert (counts["batches"], counts["backing_off"]) == (0, True)
    assert Batch.objects.count() == 1
    assert lander.looks == 1
    assert lander.wake_at - timezone.now() > first_look - lander.since
    assert Event.objects.filter(transition="back_off").count() == 1


def test_a_target_it_could_not_read_for_a_while_is_not_verified_again_at_the_same_tip(
    queue, origin, flow, tmp_path
):
    queue.approved(feature("alpha"), branch="alpha")
    red = origin.person_pushes(broken("zeta"))
    land(flow.project)
    away = origin.bare.rename(tmp_path / "away.git")  # the repository unreachable a while
    Lander.objects.update(wake_at=timezone.now() - timedelta(seconds=1))
    land(flow.project)
    away.rename(origin.bare)

    Lander.objects.update(wake_at=timezone.now() - timedelta(seconds=1))
    counts = land(flow.project)

    assert (counts["batches"], counts["backing_off"]) == (0, True)
    assert [(b.state, b.verify_runs) for b in Batch.objects.order_by("pk")] == [
        ("error", 4),
        ("error", 0),
    ]
    lander = Lander.objects.get()
    assert (lander.tip, lander.verified) == (red, True)


def test_the_lander_lands_again_once_the_target_is_fixed(queue, origin, flow):
    task, _ = queue.approved(feature("alpha"), branch="alpha")
    origin.person_pushes(broken("zeta"))
    land(flow.project)
    origin.person_pushes({"tests/test_zeta.py": None, "zeta.py": None})

    Lander.objects.update(wake_at=timezone.now() - timedelta(seconds=1))
    counts = land(flow.project)

    task.refresh_from_db()
    assert (counts["landed"], task.state) == (1, "done")
    assert Lander.objects.get().state == "ready"
    resumed = Event.objects.get(transition="resume")
    assert (resumed.from_state, resumed.to_state) == ("backing_off", "ready")


def test_a_new_head_of_the_queue_is_verified_at_once(queue, origin, flow):
    first, _ = queue.approved(feature("alpha"), branch="alpha")
    _, second = queue.approved(feature("beta"), branch="beta")
    origin.person_pushes(broken("zeta"))
    land(flow.project)
    task_dequeue(task=first, actor=flow.manager, to="ready", reason="not now")

    counts = land(flow.project)

    assert counts["batches"] == 1
    assert Batch.objects.count() == 2
    assert Lander.objects.get().head_id == second.pk
    assert Event.objects.filter(transition="back_off").count() == 2


def test_the_machines_trouble_is_not_tried_again_before_the_wait(queue, origin, flow):
    queue.approved(feature("alpha"), branch="alpha")
    shutil.rmtree(origin.bare)  # the repository is gone: nothing can be fetched or verified
    land(flow.project)

    again = land(flow.project)

    assert again == {"batches": 0, "landed": 0, "returned": 0, "settled": 0, "backing_off": True}
    batch = Batch.objects.get()
    assert (batch.state, batch.verify_runs) == ("error", 0)
    assert batch.reason.startswith("nothing landed: ")


def test_the_machines_trouble_is_tried_again_after_the_wait(queue, origin, flow):
    queue.approved(feature("alpha"), branch="alpha")
    shutil.rmtree(origin.bare)
    land(flow.project)

    Lander.objects.update(wake_at=timezone.now() - timedelta(seconds=1))  # its time came
    later = land(flow.project)

    assert later["batches"] == 1
    assert [b.state for b in Batch.objects.order_by("pk")] == ["error", "error"]
    lander = Lander.objects.get()
    assert (lander.verified, lander.tip, lander.looks) == (False, "", 1)
    assert Event.objects.filter(transition="back_off").count() == 1


def test_a_manager_wakes_a_backed_off_lander_and_it_verifies_once_more(
    queue, origin, flow, api, django_capture_on_commit_callbacks
):
    queue.approved(feature("alpha"), branch="alpha")
    origin.person_pushes(broken("zeta"))
    land(flow.project)

    with django_capture_on_commit_callbacks(execute=True):
        answer = api(flow.manager).post(
            f"/api/v1/projects/{flow.project.slug}/landing/retry/",
            {"reason": "the flaky runner is fixed"},
            format="json",
        )

    assert answer.status_code == 200
    assert answer.json()["lander"]["state"] == "ready"
    retried = Event.objects.get(transition="retry")
    assert (retried.actor, retried.reason) == (flow.manager, "the flaky runner is fixed")
    assert (retried.from_state, retried.to_state) == ("backing_off", "ready")
    assert Batch.objects.count() == 2  # the job ran: one more verification
    assert Lander.objects.get().state == "backing_off"


def test_landers_run_on_a_queue_of_their_own(settings):
    assert settings.CELERY_TASK_ROUTES["landing.jobs.land_job"] == {"queue": "land"}
    assert settings.CELERY_TASK_ROUTES["runner.jobs.verify_job"] == {"queue": "verify"}


def test_a_merged_tree_that_may_not_be_checked_out_sends_its_culprit_back(
    queue, origin, flow, settings
):
    first, _ = queue.approved(feature("alpha"), branch="alpha")
    big, big_attempt = queue.approved({"big.bin": "x" * 20_000}, branch="big")
    later, _ = queue.approved(feature("gamma"), branch="gamma")
    settings.FACTORY_RUNNER_MAX_CHECKOUT_BYTES = 10_000  # the base and the others fit

    counts = land(flow.project)

    assert (counts["landed"], counts["returned"]) == (2, 1)
    first.refresh_from_db(), big.refresh_from_db(), later.refresh_from_db()
    assert (first.state, big.state, later.state) == ("done", "ready", "done")
    big_attempt.refresh_from_db()
    assert "its tree cannot be checked out: " in big_attempt.landing["reason"]
    assert "big.bin" not in origin.files(origin.tip())
