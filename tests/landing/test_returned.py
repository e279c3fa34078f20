"""Returned work teaches: the next context says what happened and what to do; the approved
change rebased byte for byte goes back to the queue without a second review, and anything
else goes to review showing what differs from what the reviewer approved."""

from decisions import services as decision_services
from landing.lander import land
from projects.models import Event, Membership
from projects.roles import Role
from tasks import attempts, context, review
from tasks.brief import render
from tasks.landing import task_dequeue, task_landing_return
from tests.factories import all_met, submit_through_the_gates
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


def test_the_approved_change_rebased_byte_for_byte_goes_back_to_the_queue_without_a_second_review(
    queue, origin, flow, django_capture_on_commit_callbacks
):
    queue.approved(
        {"calc.py": RENAMED, "tests/test_calc.py": CALC_TESTS.replace("add", "plus")},
        branch="rename",
    )
    # The change that uses add() goes through the runner, which records its patch id.
    task, first = flow.claimed(title="Use add")
    first = submit_through_the_gates(
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

    second = submit_through_the_gates(
        second,
        origin.change("uses", {"tests/test_more.py": USES_ADD}, on="origin/main"),
        django_capture_on_commit_callbacks,
    )

    task.refresh_from_db()
    assert task.state in ("approved", "done")  # the lander may already have run on commit
    assert second.state == "approved"
    assert second.reviewed_by == flow.reviewer
    assert second.landing["rebase_of"] == first.number
    assert second.end_reason == (
        f"the same change byte for byte as attempt #{first.number}, which "
        f"{flow.reviewer.get_username()} approved (up to line offsets), held to no spec: "
        "queued to land again without a second review"
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
    first = submit_through_the_gates(
        first, origin.change("alpha", feature("alpha")), django_capture_on_commit_callbacks
    )
    review.task_approve(task=task, actor=flow.reviewer, criteria=all_met(first))
    # It comes back (a manager takes it out), and the next attempt changes the patch.
    task_dequeue(task=task, actor=flow.manager, to="ready", reason="split it")
    second = claim_again(flow, task)
    files = {**feature("alpha"), "alpha.py": "def alpha():\n    return 'alpha'  # changed\n"}

    second = submit_through_the_gates(
        second, origin.change("alpha", files, on="origin/main"), django_capture_on_commit_callbacks
    )

    task.refresh_from_db()
    assert (task.state, second.state) == ("in_review", "passed")


# --- Whitespace is meaning: only the approved bytes carry an approval -----------------------

PERM = """\
def may_delete(roles):
    if "admin" in roles:
        print("an admin deletes")
        return True
    return False
"""
# One line's indentation changed: ``return True`` leaves the ``if``, and everyone may delete.
EVERYONE = PERM.replace("        return True\n", "    return True\n")
PERM_TESTS = (
    "import unittest\n\nfrom perm import may_delete\n\n\n"
    "class PermTest(unittest.TestCase):\n    def test_admins_may_delete(self):\n"
    "        self.assertTrue(may_delete(['admin']))\n"
)
GUARD = {"perm.py": PERM, "tests/test_perm.py": PERM_TESTS}


def test_a_whitespace_change_to_an_approved_change_goes_to_review_and_never_lands_unreviewed(
    queue, origin, flow, client, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    queue.approved(
        {"calc.py": RENAMED, "tests/test_calc.py": CALC_TESTS.replace("add", "plus")},
        branch="rename",
    )
    # Approved, then sent back by the lander: its other test needs add(), renamed on main.
    task, first = flow.claimed(title="Guard deletes")
    files = {**GUARD, "tests/test_more.py": USES_ADD}
    first = submit_through_the_gates(first, origin.change("guard", files), capture)
    review.task_approve(task=task, actor=flow.reviewer, criteria=all_met(first))
    land(flow.project)
    first.refresh_from_db()
    assert first.landing["state"] == "failed"
    origin.person_pushes({"calc.py": RENAMED + "\n\nadd = plus\n"})
    main = origin.tip()
    second = claim_again(flow, task)

    second = submit_through_the_gates(
        second,
        origin.change("guard", {**files, "perm.py": EVERYONE}, on="origin/main"),
        capture,
    )
    land(flow.project)

    task.refresh_from_db()
    assert (task.state, second.state, second.reviewed_by) == ("in_review", "passed", None)
    assert origin.tip() == main
    assert not Event.objects.filter(task=task, transition="requeue").exists()
    passed = Event.objects.get(object_key=str(second), transition="gates_passed")
    assert passed.reason.endswith(
        f"reviewed again: the change differs from attempt #{first.number}, which "
        f"{flow.reviewer.get_username()} approved"
    )
    client.force_login(flow.reviewer)
    page = client.get(f"/tasks/{task.key}/").content.decode()
    assert f"What differs from attempt #{first.number}" in page
    assert "differ only in whitespace" in page


def approved_and_returned(flow, origin, capture, files, *, agent=None, branch="guard"):
    """A task whose change ``files`` was approved, then came back from landing (a conflict)."""
    task, attempt = flow.claimed(agent=agent, title="Guard deletes")
    attempt = submit_through_the_gates(attempt, origin.change(branch, files), capture)
    return task, approve_and_return(flow, task, attempt)


def approve_and_return(flow, task, attempt):
    if attempt.state == "passed":
        review.task_approve(task=task, actor=flow.reviewer, criteria=all_met(attempt))
        attempt.refresh_from_db()
    assert task_landing_return(
        attempt=attempt, state="conflict", reason="landing failed: conflict in calc.py"
    )
    attempt.refresh_from_db()
    return attempt


def resubmit(flow, task, capture, commit, *, agent=None):
    """The task claimed again (by ``agent``, else the second agent) and ``commit`` submitted."""
    attempt = attempts.task_claim(agent=agent or flow.agent2, project=flow.project)
    assert attempt.task_id == task.pk
    return submit_through_the_gates(attempt, commit, capture)


def test_an_approval_is_never_carried_to_its_reviewers_own_submission(
    queue, origin, flow, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    task, first = approved_and_returned(flow, origin, capture, GUARD)
    Membership.objects.create(user=flow.reviewer, project=flow.project, role=Role.AGENT)
    reviewer = type(flow.reviewer).objects.get(pk=flow.reviewer.pk)  # its roles read anew

    second = resubmit(flow, task, capture, first.landing["commit"], agent=reviewer)

    task.refresh_from_db()
    assert (task.state, second.state, second.reviewed_by) == ("in_review", "passed", None)
    passed = Event.objects.get(object_key=str(second), transition="gates_passed")
    assert passed.reason.endswith(
        f"{reviewer.get_username()} submitted it and approved attempt #{first.number}: "
        "nobody approves their own work"
    )


def test_an_approval_is_carried_once_and_never_again(
    queue, origin, flow, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    task, first = approved_and_returned(flow, origin, capture, GUARD)
    # The same change again, from the same base; meanwhile a person adds perm.py on main,
    # so the lander sends the carried approval back with a conflict.
    again = origin.change("again", GUARD)
    origin.person_pushes({"perm.py": "def may_delete(roles):\n    return False\n"})
    second = resubmit(flow, task, capture, again)
    assert (second.landing["rebase_of"], second.landing["state"]) == (first.number, "conflict")

    third = resubmit(flow, task, capture, again, agent=flow.agent)

    task.refresh_from_db()
    assert (task.state, third.state, third.reviewed_by) == ("in_review", "passed", None)
    passed = Event.objects.get(object_key=str(third), transition="gates_passed")
    assert passed.reason.endswith(
        f"attempt #{second.number}, which {flow.reviewer.get_username()} approved, had its "
        f"approval carried from attempt #{first.number}: an approval is carried once"
    )


def test_an_approval_given_under_another_spec_version_is_not_carried(
    queue, origin, flow, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    spec = flow.spec(
        criteria=[{"key": "AC-1", "text": "Only admins delete.", "proof": {"check": "review"}}]
    )
    task, first = flow.claimed(title="Guard deletes", spec=spec)
    first = submit_through_the_gates(first, origin.change("guard", GUARD), capture)
    review.task_approve(
        task=task,
        actor=flow.reviewer,
        criteria=[{"key": "AC-1", "verdict": "met", "note": "only admins"}],
    )
    first.refresh_from_db()
    approve_and_return(flow, task, first)
    version = decision_services.spec_version_create(
        spec=spec,
        actor=flow.manager,
        body="# Spec\n",
        criteria=[
            {"key": "AC-1", "text": "Admins and owners delete.", "proof": {"check": "review"}}
        ],
    )
    decision_services.spec_version_accept(version=version, actor=flow.manager)

    second = resubmit(flow, task, capture, first.landing["commit"])

    task.refresh_from_db()
    assert (task.state, second.state) == ("in_review", "passed")
    passed = Event.objects.get(object_key=str(second), transition="gates_passed")
    assert passed.reason.endswith(
        f"it is held to {spec.key} v2; attempt #{first.number}, which "
        f"{flow.reviewer.get_username()} approved, was held to {spec.key} v1"
    )
