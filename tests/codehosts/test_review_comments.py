"""A reviewer's line comment on the task's pull request, against the stand-in: posted by a
job after the comment committed, as a review comment on the same file, lines and side at
the attempt's commit; once however often the job runs; as a plain comment naming the lines
when the pull request no longer shows the commit or the host refuses the lines; never for
a project without a code host, and never in the way of the comment itself."""

import pytest

from codehosts import jobs, sync
from codehosts.line_comments import line_comment_post
from codehosts.models import TaskPullRequest
from codehosts.providers import HostError, provider_for
from tasks import attempts, comments, review
from tasks.api_review import LineCommentSerializer
from tasks.models import LineComment
from tests.factories import Flow, ProjectFactory

BRANCH = "fm/WID-1"
PATH = "tasks/queue.py"
BEFORE = "def claim(tasks):\n    return tasks[0]\n"
AFTER = "def claim(tasks):\n    ready = [t for t in tasks if t.ready]\n    return ready[0]\n"
DIFF = (
    b"diff --git a/tasks/queue.py b/tasks/queue.py\n--- a/tasks/queue.py\n+++ b/tasks/queue.py\n"
    b"@@ -1,2 +1,3 @@\n def claim(tasks):\n-    return tasks[0]\n"
    b"+    ready = [t for t in tasks if t.ready]\n+    return ready[0]\n"
)
POST = "POST /repos/octo-org/widgets/pulls/1/comments"
TASK = "[WID-1](http://127.0.0.1:8000/tasks/WID-1/)"


def in_review(hosted, repo, capture, *, before=BEFORE, after=AFTER):
    """A task whose attempt (diff ``DIFF``) waits for review, its pull request open at the
    attempt's commit; the reviewer is Ada Lovelace."""
    repo.git.commit("main", {PATH: before}, "queue")
    _task, attempt = hosted.claimed(title="Skip blocked tasks", allowed_paths=["tasks/**"])
    sha = repo.git.commit(BRANCH, {PATH: after}, "skip blocked", start="main")
    hosted.attach(attempt, DIFF, kind="diff", name="change.diff")
    with capture(execute=True):
        attempt = attempts.attempt_submit(
            attempt=attempt,
            actor=hosted.agent,
            summary="s",
            change={"commit": sha, "branch": BRANCH},
        )
        if attempt.state == "checking":
            attempt = attempts.attempt_gates_passed(attempt=attempt)
    hosted.reviewer.first_name, hosted.reviewer.last_name = "Ada", "Lovelace"
    hosted.reviewer.save()
    attempt.refresh_from_db()
    return attempt, sha


def commented(hosted, attempt, capture, **fields):
    fields.setdefault("path", PATH)
    fields.setdefault("body", "this ignores dependencies")
    with capture(execute=True):
        return comments.comment_add(attempt=attempt, actor=hosted.reviewer, **fields)


def review_comments(repo):
    return [
        (c.path, c.start_line, c.line, c.side, c.commit, c.user)
        for c in repo.pulls[1].review_comments
    ]


def lines_posted(attempt):
    return TaskPullRequest.objects.get(task=attempt.task).posted.get("lines")


def test_a_line_comment_is_a_review_comment_at_its_line_naming_the_reviewer(
    hosted, repo, django_capture_on_commit_callbacks
):
    attempt, sha = in_review(hosted, repo, django_capture_on_commit_callbacks)

    made = commented(hosted, attempt, django_capture_on_commit_callbacks, line=3)

    posted = repo.pulls[1].review_comments
    assert review_comments(repo) == [(PATH, None, 3, "RIGHT", sha, "factory-memory[bot]")]
    assert posted[0].body == (
        f"`Ada Lovelace` on Factory Memory, reviewing WID-1#1 of {TASK}:\n\n"
        f"> this ignores dependencies\n\n<!-- factory-memory:line-comment WID-1 {made.pk} -->"
    )
    assert repo.comments == []
    assert lines_posted(attempt) == {
        str(made.pk): {
            "as": "review",
            "id": posted[0].id,
            "url": f"https://standin.invalid/octo-org/widgets/pull/1#discussion_r{posted[0].id}",
        }
    }


def test_a_range_names_its_first_line_and_the_old_side_is_left(
    hosted, repo, django_capture_on_commit_callbacks
):
    attempt, sha = in_review(hosted, repo, django_capture_on_commit_callbacks)

    commented(hosted, attempt, django_capture_on_commit_callbacks, line=2, end_line=3)
    commented(hosted, attempt, django_capture_on_commit_callbacks, line=2, side="old")

    assert review_comments(repo) == [
        (PATH, 2, 3, "RIGHT", sha, "factory-memory[bot]"),
        (PATH, None, 2, "LEFT", sha, "factory-memory[bot]"),
    ]


def test_comments_written_with_a_rejection_reach_the_lines_beside_the_verdict(
    hosted, repo, django_capture_on_commit_callbacks
):
    attempt, sha = in_review(hosted, repo, django_capture_on_commit_callbacks)

    with django_capture_on_commit_callbacks(execute=True):
        review.task_reject(
            task=attempt.task,
            actor=hosted.reviewer,
            reason="blocked tasks are claimed",
            comments=[{"path": PATH, "line": 2, "end_line": 3, "body": "skip blocked ones"}],
        )

    assert review_comments(repo) == [(PATH, 2, 3, "RIGHT", sha, "factory-memory[bot]")]
    assert [c.body.splitlines()[0] for c in repo.comments] == [
        "wid-reviewer rejected WID-1#1 on Factory Memory."
    ]


def test_the_job_run_again_posts_nothing_more(hosted, repo, django_capture_on_commit_callbacks):
    attempt, _ = in_review(hosted, repo, django_capture_on_commit_callbacks)
    made = commented(hosted, attempt, django_capture_on_commit_callbacks, line=3)
    first = repo.pulls[1].review_comments[0]

    again = jobs.line_comment_post_job.delay(made.pk).get()

    assert again == f"{PATH}:3: posted already as review {first.id}"
    assert len(repo.pulls[1].review_comments) == 1
    assert repo.comments == []


def test_a_host_that_fails_once_is_tried_again_and_posts_once(
    hosted, repo, github, django_capture_on_commit_callbacks
):
    attempt, _ = in_review(hosted, repo, django_capture_on_commit_callbacks)
    github.fail("502", match=POST)

    commented(hosted, attempt, django_capture_on_commit_callbacks, line=3)

    # The stand-in records a call it faulted as status 0 (it answered 502, acting on nothing).
    assert [c for c in github.calls() if c.startswith(POST)] == [f"{POST} 0", f"{POST} 201"]
    assert len(repo.pulls[1].review_comments) == 1
    assert repo.comments == []


def test_a_post_whose_answer_was_lost_is_found_not_posted_again(
    hosted, repo, github, django_capture_on_commit_callbacks
):
    attempt, _ = in_review(hosted, repo, django_capture_on_commit_callbacks)
    github.fail("lost", match=POST)

    made = commented(hosted, attempt, django_capture_on_commit_callbacks, line=3)

    first = repo.pulls[1].review_comments
    assert len(first) == 1
    assert [c for c in github.calls() if "/comments" in c] == [
        f"{POST} 0",
        "GET /repos/octo-org/widgets/pulls/1/comments 200",
    ]
    assert lines_posted(attempt)[str(made.pk)] == {
        "as": "review",
        "id": first[0].id,
        "url": f"https://standin.invalid/octo-org/widgets/pull/1#discussion_r{first[0].id}",
    }


def test_lines_the_host_refuses_become_a_comment_naming_them(
    hosted, repo, github, django_capture_on_commit_callbacks
):
    # The host's diff shows only the end of the file: line 2 is not in it, though the
    # attempt's own diff (the site's) shows it.
    filler = "".join(f"# {n}\n" for n in range(20))
    attempt, _ = in_review(
        hosted,
        repo,
        django_capture_on_commit_callbacks,
        before=BEFORE + filler + "end\n",
        after=BEFORE + filler + "end.\n",
    )

    made = commented(hosted, attempt, django_capture_on_commit_callbacks, line=2, side="old")

    assert [c for c in github.calls() if c.startswith(POST)] == [f"{POST} 422"]
    assert repo.pulls[1].review_comments == []
    why = "the host refused the lines: Validation Failed (422)"
    assert [(c.issue, c.body) for c in repo.comments] == [
        (
            1,
            "On `tasks/queue.py:2` (the original's lines):\n"
            f"`Ada Lovelace` on Factory Memory, reviewing WID-1#1 of {TASK}:\n\n"
            f"> this ignores dependencies\n\n(Not on the lines: {why}.)\n\n"
            f"<!-- factory-memory:line-comment WID-1 {made.pk} -->",
        )
    ]
    assert lines_posted(attempt)[str(made.pk)]["why"] == why


def test_a_pull_request_that_moved_on_gets_a_comment_naming_the_lines(
    hosted, repo, github, django_capture_on_commit_callbacks
):
    attempt, _ = in_review(hosted, repo, django_capture_on_commit_callbacks)
    repo.git.commit(BRANCH, {"other.py": "x = 1\n"}, "pushed after the submission")

    made = commented(hosted, attempt, django_capture_on_commit_callbacks, line=2, end_line=3)

    assert [c for c in github.calls() if c.startswith(POST)] == []
    assert repo.pulls[1].review_comments == []
    assert [c.body.splitlines()[0] for c in repo.comments] == [
        "On `tasks/queue.py:2-3` (the changed file's lines):"
    ]
    assert lines_posted(attempt)[str(made.pk)] == {
        "as": "comment",
        "id": repo.comments[0].id,
        "url": f"https://standin.invalid/octo-org/widgets/issues/1#issuecomment-{repo.comments[0].id}",
        "why": "pull request #1 no longer shows WID-1#1's commit",
    }


def test_a_project_without_a_code_host_calls_nothing(
    github, db, django_capture_on_commit_callbacks
):
    flow = Flow(ProjectFactory(slug="NON"))
    flow.gates({})
    _task, attempt = flow.claimed(allowed_paths=["tasks/**"])
    flow.attach(attempt, DIFF, kind="diff", name="change.diff")
    attempts.attempt_submit(attempt=attempt, actor=flow.agent, summary="s", change={})
    attempt = attempts.attempt_gates_passed(attempt=attempt)

    made = commented(flow, attempt, django_capture_on_commit_callbacks, line=3)

    assert line_comment_post(comment_id=made.pk) == "no code host"
    assert github.calls() == []
    assert not TaskPullRequest.objects.exists()


def test_the_comment_is_stored_and_answered_alike_while_the_host_is_down(
    hosted, repo, github, api, settings, django_capture_on_commit_callbacks
):
    attempt, _ = in_review(hosted, repo, django_capture_on_commit_callbacks)
    settings.FACTORY_CODE_HOST_JOB_RETRIES = 1
    github.fail("502", count=1000)

    with django_capture_on_commit_callbacks(execute=True):
        answer = api(hosted.reviewer).post(
            f"/api/v1/attempts/{attempt.pk}/comments/",
            {"path": PATH, "line": 3, "body": "this ignores dependencies"},
            format="json",
        )

    stored = LineComment.objects.get()
    assert answer.status_code == 201
    assert answer.json() == LineCommentSerializer(stored).data
    assert (stored.path, stored.line, stored.end_line, stored.side) == (PATH, 3, 3, "new")
    assert lines_posted(attempt) is None
    assert repo.pulls[1].review_comments == []
    assert repo.comments == []


def test_a_listing_longer_than_the_page_bound_ends_with_a_reason_not_a_repost(
    hosted, repo, github, django_capture_on_commit_callbacks
):
    in_review(hosted, repo, django_capture_on_commit_callbacks)
    host = provider_for(hosted.project, page_size=1, max_pages=2)
    for body in ("first", "second", "third"):
        host.comment(1, body)

    with pytest.raises(HostError) as ended:
        host.comment_marked(1, "<!-- nowhere -->")

    assert ended.value.detail == (
        "the host named a page after 2 pages of comments on #1 (1 a page): not read further"
    )
    listed = [c for c in github.calls() if c.startswith("GET /repos/octo-org/widgets/issues/1/")]
    assert len(listed) == 2


def test_a_comment_written_while_the_task_had_no_pull_request_is_posted_once_by_the_sweep(
    hosted, repo, github, django_capture_on_commit_callbacks
):
    github.fail("502", count=100, match="/pulls")
    attempt, sha = in_review(hosted, repo, django_capture_on_commit_callbacks)
    comment = commented(hosted, attempt, django_capture_on_commit_callbacks, line=3)
    assert (repo.pulls, TaskPullRequest.objects.exists()) == ({}, False)
    github.faults.clear()

    first = sync.hosts_reconcile()
    second = sync.hosts_reconcile()

    assert (first["pull_requests_synced"], first["line_comments_posted"]) == (1, 1)
    assert (second["pull_requests_synced"], second["line_comments_posted"]) == (0, 0)
    assert review_comments(repo) == [(PATH, None, 3, "RIGHT", sha, "factory-memory[bot]")]
    assert list(lines_posted(attempt)) == [str(comment.pk)]


def test_the_next_sync_of_the_pull_request_posts_a_comment_written_while_it_had_none(
    hosted, repo, github, django_capture_on_commit_callbacks
):
    github.fail("502", count=100, match="/pulls")
    attempt, sha = in_review(hosted, repo, django_capture_on_commit_callbacks)
    comment = commented(hosted, attempt, django_capture_on_commit_callbacks, line=3)
    github.faults.clear()

    said = jobs.pull_request_sync_job.delay(attempt.task_id).get()

    assert said == (
        f"WID-1: pull request #1; {comment.where}: review comment"
        f" {repo.pulls[1].review_comments[0].id} on #1"
    )
    assert review_comments(repo) == [(PATH, None, 3, "RIGHT", sha, "factory-memory[bot]")]


def test_a_marked_comment_is_found_page_after_page(
    hosted, repo, github, django_capture_on_commit_callbacks
):
    in_review(hosted, repo, django_capture_on_commit_callbacks)
    host = provider_for(hosted.project, page_size=1)
    host.comment(1, "first")
    marked = host.comment(1, "second\n\n<!-- mark -->")

    found = host.comment_marked(1, "<!-- mark -->")

    assert found == ("comment", marked)
    assert host.comment_marked(1, "<!-- nowhere -->") is None
    assert [c for c in github.calls() if c.startswith("GET") and "/comments" in c][:4] == [
        "GET /repos/octo-org/widgets/pulls/1/comments 200",
        "GET /repos/octo-org/widgets/issues/1/comments 200",
        "GET /repos/octo-org/widgets/issues/1/comments 200",
        "GET /repos/octo-org/widgets/pulls/1/comments 200",
    ]
