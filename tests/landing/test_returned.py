"""Returned work teaches: the next context says what happened and what to do, and a clean
rebase of an approved change goes back to the queue without a second review."""

from landing.lander import land
from projects.models import Event
from tasks import attempts, context, review
from tasks.brief import render
from tasks.landing import task_dequeue
from tests.factories import all_met
from tests.landing.conftest import CALC, CALC_TESTS, feature

USES_ADD = (
    "import unittest\n\nfrom calc import add\n\n\n"
    "class MoreTest(unittest.TestCase):\n    def test_add_zero(self):\n"
    "        self.assertEqual(add(0, 1), 1)\n"
)
RENAMED = CALC.replace("def add(", "def plus(").replace("return add(a, a)", "return plus(a, a)")


def claim_again(flow, task):
    attempt = attempts.task_claim(agent=flow.agent2, project=flow.project, lease_seconds=300)
    assert attempt.task_id == task.pk
    return attempt


def submit_through_the_runner(attempt, commit, capture):
    """Submit, with the gates (the runner among them) run as workers would."""
    with capture(execute=True):
        attempts.attempt_submit(
            attempt=attempt, actor=attempt.agent, summary="done", change={"commit": commit}
        )
    attempt.refresh_from_db()
    attempt.task.refresh_from_db()
    return attempt


def test_the_next_context_after_a_conflict_says_what_happened_and_what_to_do(queue, origin, flow):
    queue.approved({"calc.py": CALC.replace("return a + b", "return b + a")}, branch="one")
    task, _ = queue.approved(
        {"calc.py": CALC.replace("return a + b", "return sum((a, b))")}, branch="two"
    )
    land(flow.project)
    task.refresh_from_db()
    attempt = claim_again(flow, task)

    bundle = context.build(task, current=attempt)

    lesson = bundle["attempts"][0]["landing"]
    assert lesson["state"] == "conflict"
    assert lesson["paths"] == ["calc.py"]
    assert lesson["what_to_do"].startswith("rebase the approved change onto main and resolve")
    brief = render(bundle)
    assert "It came back from landing: landing failed: conflict in calc.py with " in brief
    assert "Conflict in `calc.py`:" in brief
    assert "What to do: rebase the approved change onto main" in brief


def test_a_clean_rebase_goes_back_to_the_queue_without_a_second_review(
    queue, origin, flow, django_capture_on_commit_callbacks
):
    queue.approved(
        {"calc.py": RENAMED, "tests/test_calc.py": CALC_TESTS.replace("add", "plus")},
        branch="rename",
    )
    # The change that uses add() goes through the runner, which records its patch id.
    task, first = flow.claimed(title="Use add")
    first = submit_through_the_runner(
        first,
        origin.change("uses", {"tests/test_more.py": USES_ADD}),
        django_capture_on_commit_callbacks,
    )
    assert first.state == "passed", first.end_reason
    review.task_approve(task=task, actor=flow.reviewer, criteria=all_met(first))
    land(flow.project)
    first.refresh_from_db(), task.refresh_from_db()
    assert (task.state, first.landing["state"]) == ("ready", "failed")
    # Someone brings add() back on main; the agent rebases the same patch onto it.
    origin.person_pushes({"calc.py": RENAMED + "\n\nadd = plus\n"})
    second = claim_again(flow, task)

    second = submit_through_the_runner(
        second,
        origin.change("uses", {"tests/test_more.py": USES_ADD}, on="origin/main"),
        django_capture_on_commit_callbacks,
    )

    task.refresh_from_db()
    assert task.state in ("approved", "done")  # the lander may already have run on commit
    assert second.state == "approved"
    assert second.reviewed_by == flow.reviewer
    assert second.landing["rebase_of"] == first.number
    assert second.end_reason.startswith(
        f"a clean rebase of attempt #{first.number} (the same patch id), which "
        f"{flow.reviewer.get_username()} approved"
    )
    requeued = Event.objects.filter(task=task, transition="requeue")
    assert sorted(requeued.values_list("object_key", flat=True)) == [task.key, str(second)]
    land(flow.project)
    task.refresh_from_db()
    assert task.state == "done"
    assert "tests/test_more.py" in origin.files(origin.tip())


def test_a_changed_patch_needs_a_second_review(
    queue, origin, flow, django_capture_on_commit_callbacks
):
    task, first = flow.claimed(title="Add alpha")
    first = submit_through_the_runner(
        first, origin.change("alpha", feature("alpha")), django_capture_on_commit_callbacks
    )
    review.task_approve(task=task, actor=flow.reviewer, criteria=all_met(first))
    # It comes back (a manager takes it out), and the next attempt changes the patch.
    task_dequeue(task=task, actor=flow.manager, to="ready", reason="split it")
    second = claim_again(flow, task)
    files = {**feature("alpha"), "alpha.py": "def alpha():\n    return 'alpha'  # changed\n"}

    second = submit_through_the_runner(
        second, origin.change("alpha", files, on="origin/main"), django_capture_on_commit_callbacks
    )

    task.refresh_from_db()
    assert (task.state, second.state) == ("in_review", "passed")
