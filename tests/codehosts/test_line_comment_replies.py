"""A person's reply on GitHub in the thread of a reviewer's line comment is shown under that
comment on the task's page, as the host shows it now (never the payload's words): named as
the member their account is linked to, else as their login on GitHub; their text quoted and
escaped; edited there, edited here; deleted there, gone here. The site's own comments,
threads it did not start, and replies to other comments are not its replies."""

import hashlib
import hmac
import json

import pytest

from codehosts.line_comments import line_comment_replies_sync
from codehosts.models import HostAccount, HostDelivery, LineCommentReply
from codehosts.providers import HostUser, ReviewComment
from tests.codehosts.test_deliveries import SECRET
from tests.codehosts.test_review_comments import commented, in_review


def replied(client, github, capture, *, delivery="r-1", body="(the payload's words)") -> str:
    """GitHub's ``pull_request_review_comment`` delivery about pull request #1, processed;
    its result. The payload's comment is never read."""
    payload = json.dumps(
        {
            "action": "created",
            "comment": {"id": 1, "body": body, "in_reply_to_id": 1},
            "pull_request": {"number": 1},
            "repository": {
                "full_name": "octo-org/widgets",
                "url": f"{github.url}/repos/octo-org/widgets",
            },
        }
    ).encode()
    signature = "sha256=" + hmac.new(SECRET.encode(), payload, hashlib.sha256).hexdigest()
    with capture(execute=True):
        answer = client.post(
            "/hooks/github/",
            payload,
            content_type="application/json",
            HTTP_X_GITHUB_EVENT="pull_request_review_comment",
            HTTP_X_GITHUB_DELIVERY=delivery,
            HTTP_X_HUB_SIGNATURE_256=signature,
        )
    assert answer.status_code == 202
    return HostDelivery.objects.get(delivery_id=delivery).result


@pytest.fixture
def thread(hosted, repo, monkeypatch, django_capture_on_commit_callbacks):
    """The reviewer's line comment on WID-1#1, posted on pull request #1 as a review
    comment; ``(attempt, comment, the host's review comment)``."""
    monkeypatch.setenv("FACTORY_HOST_WIDGETS_HOOK", SECRET)
    attempt, _ = in_review(hosted, repo, django_capture_on_commit_callbacks)
    comment = commented(hosted, attempt, django_capture_on_commit_callbacks, line=3)
    posted = repo.pulls[1].review_comments[0]
    return attempt, comment, posted


def page(client, hosted) -> str:
    client.force_login(hosted.reviewer)
    return client.get("/tasks/WID-1/").content.decode()


def test_a_reply_on_github_is_shown_under_the_comment_as_the_host_shows_it(
    thread, hosted, repo, github, client, django_capture_on_commit_callbacks
):
    _, comment, posted = thread
    github.world.person("bo")
    reply = github.world.reply(repo, 1, posted.id, "Blocked tasks <b>are</b> skipped\nnow", "bo")

    result = replied(client, github, django_capture_on_commit_callbacks)

    assert result == "WID-1: 1 replies to line comments on #1"
    kept = LineCommentReply.objects.get()
    assert (kept.comment, kept.host_id, kept.author_login, kept.body) == (
        comment,
        reply.id,
        "bo",
        "Blocked tasks <b>are</b> skipped\nnow",
    )
    html = page(client, hosted)
    assert "bo on GitHub replied on the pull request" in html
    assert "Blocked tasks &lt;b&gt;are&lt;/b&gt; skipped<br>now" in html
    assert "(the payload&#x27;s words)" not in html and "the payload's words" not in html
    assert f'href="https://standin.invalid/octo-org/widgets/pull/1#discussion_r{reply.id}"' in html


def test_a_linked_accounts_reply_names_the_member(
    thread, hosted, repo, github, client, django_capture_on_commit_callbacks
):
    _, _, posted = thread
    HostAccount.objects.create(
        project=hosted.project,
        host_id=github.world.person("ag"),
        login="ag",
        user=hosted.agent,
        linked_by=hosted.manager,
    )
    github.world.reply(repo, 1, posted.id, "fixed in the next attempt", "ag")

    replied(client, github, django_capture_on_commit_callbacks)

    assert "wid-agent replied on the pull request" in page(client, hosted)


def test_an_edit_or_a_deletion_on_github_follows_here(
    thread, hosted, repo, github, client, django_capture_on_commit_callbacks
):
    _, _, posted = thread
    github.world.person("bo")
    first = github.world.reply(repo, 1, posted.id, "first words", "bo")
    second = github.world.reply(repo, 1, posted.id, "second words", "bo")
    replied(client, github, django_capture_on_commit_callbacks, delivery="r-1")

    first.body = "first words, edited"
    repo.pulls[1].review_comments.remove(second)
    result = replied(client, github, django_capture_on_commit_callbacks, delivery="r-2")

    assert result == "WID-1: 1 replies to line comments on #1, 1 deleted there"
    assert list(LineCommentReply.objects.values_list("host_id", "body")) == [
        (first.id, "first words, edited")
    ]


def test_the_sites_own_comments_and_other_threads_are_not_replies(
    thread, hosted, repo, github, client, django_capture_on_commit_callbacks
):
    _, _, posted = thread
    github.world.person("bo")
    # The site's own account in the thread, and a person's comment starting its own thread
    # and a reply to that: none of them answers the reviewer's comment.
    github.world.reply(repo, 1, posted.id, "a note of the site's", "factory-memory[bot]")
    theirs = github.world.reply(repo, 1, posted.id, "x", "bo")
    theirs.in_reply_to = None
    github.world.reply(repo, 1, theirs.id, "answering bo", "bo")

    result = replied(client, github, django_capture_on_commit_callbacks)

    assert result == "WID-1: 0 replies to line comments on #1"
    assert LineCommentReply.objects.count() == 0


def test_a_reply_whose_address_is_not_a_web_address_is_not_linked(thread, hosted, repo):
    _, comment, posted = thread

    class Host:
        def review_comments(self, number):
            return [
                ReviewComment(
                    id=77,
                    body="look",
                    author=HostUser(id=5, login="bo"),
                    url="javascript:alert(1)",
                    written_at="not a time",
                    in_reply_to=posted.id,
                )
            ]

    pull = type("Pull", (), {"number": 1, "author": "factory-memory[bot]"})()
    line_comment_replies_sync(task=comment.attempt.task, pull=pull, host=Host())

    kept = LineCommentReply.objects.get()
    assert (kept.url, kept.written_at, kept.body) == ("", None, "look")


def test_a_task_without_a_line_comment_on_the_host_reads_nothing(
    hosted, repo, github, client, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setenv("FACTORY_HOST_WIDGETS_HOOK", SECRET)
    in_review(hosted, repo, django_capture_on_commit_callbacks)
    before = len(github.calls())

    result = replied(client, github, django_capture_on_commit_callbacks)

    assert result == "WID-1: no line comment of the site's on #1"
    assert [c for c in github.calls()[before:] if "/comments" in c] == []
