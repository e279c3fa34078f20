"""Comments on diff lines: a reviewer names the lines that are wrong, they reach the next
attempt's context, and they are resolved when a later attempt changes those lines."""

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from projects.errors import Conflict, PermissionDenied
from projects.models import Event
from projects.roles import Role
from tasks import attempts, brief, comments, context, review
from tasks.models import LineComment
from tests.factories import member

FIRST = (
    b"diff --git a/tasks/queue.py b/tasks/queue.py\n--- a/tasks/queue.py\n+++ b/tasks/queue.py\n"
    b"@@ -1,2 +1,3 @@\n def claim(tasks):\n-    return tasks[0]\n"
    b"+    ready = [t for t in tasks if t.ready]\n+    return ready[0]\n"
)
# The second attempt keeps line 2 and changes line 3.
SECOND = FIRST.replace(b"+    return ready[0]\n", b"+    return ready[0] if ready else None\n")


@pytest.fixture
def reviewed(flow):
    """A task in review whose attempt's diff is FIRST."""
    flow.gates({})
    task, attempt = flow.claimed(title="Claims skip blocked tasks", allowed_paths=["tasks/**"])
    flow.attach(attempt, FIRST, kind="diff", name="change.diff")
    attempts.attempt_submit(attempt=attempt, actor=flow.agent, summary="s", change={})
    attempts.attempt_gates_passed(attempt=attempt)
    task.refresh_from_db()
    attempt.refresh_from_db()
    return task, attempt


def comment(flow, attempt, **fields):
    fields.setdefault("path", "tasks/queue.py")
    fields.setdefault("body", "this ignores dependencies")
    return comments.comment_add(attempt=attempt, actor=flow.reviewer, **fields)


def test_a_reviewer_comments_on_lines_of_the_diff(flow, reviewed):
    _, attempt = reviewed

    one = comment(flow, attempt, line=2, end_line=3)
    old = comment(flow, attempt, line=2, side="old", body="why drop this?")

    assert (one.where, one.quote) == (
        "tasks/queue.py:2-3",
        [[2, "    ready = [t for t in tasks if t.ready]", True], [3, "    return ready[0]", True]],
    )
    assert (old.where, old.quote) == ("tasks/queue.py:2 (old)", [[2, "    return tasks[0]", True]])
    assert Event.objects.filter(transition="comment").count() == 2


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"line": 4}, "line", "the diff does not show line 4 of tasks/queue.py (new side)"),
        (
            {"line": 3, "side": "old"},
            "line",
            "the diff does not show line 3 of tasks/queue.py (old side)",
        ),
        (
            {"line": 1, "path": "tasks/other.py"},
            "path",
            "FM-1#1's diff does not change tasks/other.py",
        ),
        ({"line": 1, "body": "x" * 100_001}, "body", "at most 10000 characters"),
        ({"line": 1, "body": "   "}, "body", "say what is wrong"),
        ({"line": 0}, "line", "a line from 1"),
    ],
)
def test_a_comment_on_what_the_diff_does_not_show_is_refused_by_field(
    flow, reviewed, fields, field, message
):
    _, attempt = reviewed

    with pytest.raises(ValidationError) as refused:
        comment(flow, attempt, **fields)

    assert refused.value.message_dict[field] == [message]
    assert LineComment.objects.count() == 0


def test_lines_named_last_one_first_are_the_same_lines(flow, reviewed):
    _, attempt = reviewed

    made = comment(flow, attempt, line=3, end_line=2)

    assert (made.line, made.end_line, made.where) == (2, 3, "tasks/queue.py:2-3")
    assert [n for n, *_ in made.quote] == [2, 3]


def test_nobody_but_another_reviewer_comments_and_nothing_after_the_verdict(flow, reviewed):
    task, attempt = reviewed
    with pytest.raises(PermissionDenied):
        comments.comment_add(
            attempt=attempt, actor=flow.agent, path="tasks/queue.py", line=1, body="b"
        )
    review.task_approve(task=task, actor=flow.reviewer)
    attempt.refresh_from_db()

    with pytest.raises(Conflict) as late:
        comment(flow, attempt, line=1)

    assert late.value.code == "invalid_state"
    assert LineComment.objects.count() == 0


def test_comments_come_with_a_rejection_or_not_at_all(flow, reviewed):
    task, _ = reviewed

    with pytest.raises(ValidationError) as refused:
        review.task_reject(
            task=task,
            actor=flow.reviewer,
            reason="see the comments",
            comments=[
                {"path": "tasks/queue.py", "line": 2, "body": "a"},
                {"path": "x.py", "line": 1, "body": "b"},
            ],
        )
    assert refused.value.message_dict == {
        "comments[1].path": ["FM-1#1's diff does not change x.py"]
    }
    task.refresh_from_db()
    assert (task.state, LineComment.objects.count()) == ("in_review", 0)

    review.task_reject(
        task=task,
        actor=flow.reviewer,
        reason="see the comments",
        comments=[{"path": "tasks/queue.py", "line": 2, "body": "a"}],
    )
    task.refresh_from_db()
    assert (task.state, LineComment.objects.get().line) == ("ready", 2)


def test_the_next_attempt_is_told_the_lines_and_a_changed_line_is_resolved(flow, reviewed):
    task, _ = reviewed
    review.task_reject(
        task=task,
        actor=flow.reviewer,
        reason="two lines are wrong",
        comments=[
            {"path": "tasks/queue.py", "line": 2, "body": "keep the filter"},
            {"path": "tasks/queue.py", "line": 3, "body": "an empty list fails here"},
        ],
    )
    second = attempts.task_claim(agent=flow.agent2, project=flow.project)

    bundle = context.build(task, current=second)
    markdown = brief.render(context.build(task, current=second, markdown=True))
    flow.attach(second, SECOND, kind="diff", name="change.diff")
    attempts.attempt_submit(attempt=second, actor=flow.agent2, summary="s", change={})

    [earlier] = bundle["attempts"]
    assert [(c["line"], c["text"], c["resolved"]) for c in earlier["comments"]] == [
        (2, "keep the filter", False),
        (3, "an empty list fails here", False),
    ]
    assert "- [ ] `tasks/queue.py:3` an empty list fails here" in markdown
    assert {
        c.line: (c.resolved_at is not None, c.resolved_reason) for c in LineComment.objects.all()
    } == {
        2: (False, ""),
        3: (True, "FM-1#2 changed these lines"),
    }


def test_a_reviewer_comments_from_the_task_page_and_the_text_is_shown_escaped(
    flow, reviewed, client
):
    task, _ = reviewed
    client.force_login(flow.reviewer)

    answer = client.post(
        f"/tasks/{task.key}/comments/",
        {
            "path": "tasks/queue.py",
            "line": 2,
            "end_line": 3,
            "side": "new",
            "body": "<script>x()</script>",
        },
    )
    page = client.get(f"/tasks/{task.key}/").content.decode()

    assert answer.status_code == 302
    assert LineComment.objects.get().where == "tasks/queue.py:2-3"
    assert "&lt;script&gt;x()&lt;/script&gt;" in page
    assert "<script>x()" not in page


def test_a_refused_comment_from_the_page_says_why_and_stores_nothing(flow, reviewed, client):
    task, _ = reviewed
    client.force_login(flow.reviewer)

    answer = client.post(
        f"/tasks/{task.key}/comments/",
        {"path": "tasks/queue.py", "line": 9, "body": "b"},
        follow=True,
    )

    assert "the diff does not show line 9 of tasks/queue.py (new side)" in answer.content.decode()
    assert LineComment.objects.count() == 0


def test_the_api_lists_and_writes_comments(flow, reviewed, api):
    _, attempt = reviewed
    url = f"/api/v1/attempts/{attempt.pk}/comments/"

    made = api(flow.reviewer).post(
        url, {"path": "tasks/queue.py", "line": 3, "body": "empty?"}, format="json"
    )
    too_long = api(flow.reviewer).post(
        url, {"path": "tasks/queue.py", "line": 3, "body": "x" * 100_000}, format="json"
    )
    listed = api(flow.agent).get(url).json()

    assert made.status_code == 201
    assert (too_long.status_code, list(too_long.json()["fields"])) == (400, ["body"])
    assert [(c["path"], c["line"], c["body"], c["resolved"]) for c in listed] == [
        ("tasks/queue.py", 3, "empty?", False)
    ]


def test_the_task_page_asks_the_same_queries_for_200_comments_as_for_one(
    flow, reviewed, client, django_assert_num_queries
):
    task, attempt = reviewed
    client.force_login(flow.manager)
    comment(flow, attempt, line=2)
    with CaptureQueriesContext(connection) as one:
        client.get(f"/tasks/{task.key}/")
    for n in range(199):
        comment(flow, attempt, line=3, body=f"comment {n}")

    with django_assert_num_queries(len(one.captured_queries)):
        page = client.get(f"/tasks/{task.key}/")

    assert page.content.decode().count("data-comment=") == 200


def test_an_agent_who_is_also_a_reviewer_cannot_resolve_comments_on_its_task(flow, reviewed):
    task, attempt = reviewed
    open_comment = comment(flow, attempt, line=2)
    review.task_reject(task=task, actor=flow.reviewer, reason="see the comment")
    member(flow.project, Role.REVIEWER, flow.agent2.username)  # agent2 is now both
    attempts.task_claim(agent=flow.agent2, project=flow.project)

    with pytest.raises(PermissionDenied) as refused:
        comments.comment_resolve(comment=open_comment, actor=flow.agent2)

    assert refused.value.code == "own_work"
    open_comment.refresh_from_db()
    assert open_comment.resolved_at is None
    assert not Event.objects.filter(transition="resolve").exists()
