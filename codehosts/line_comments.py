"""A reviewer's line comment on the task's pull request (docs/code-hosts.md, "A reviewer's
line comment").

``line_comment_post`` posts one ``tasks.LineComment`` to the pull request of its task as a
review comment on the same file, lines and side, at the attempt's commit. When the pull
request no longer shows that commit, or the host refuses the lines (GitHub: 422, not in
its diff), it posts a plain comment on the pull request naming the file and lines
instead, and says why. What was posted is kept on ``TaskPullRequest.posted["lines"]``
by the comment's id, so the job runs again without posting twice; a post whose answer
was lost is looked for on the host by its marker before anything is posted again. Called
by a job after the comment committed, never inside the request (ADR 0038).

``line_comment_replies_sync`` brings people's replies on the host, in the threads of the
review comments the site posted, to the task's page (``LineCommentReply``), as the host
shows them now.
"""

from datetime import datetime

from django.db import transaction

from codehosts.models import LineCommentReply, TaskPullRequest
from codehosts.providers import Refused, provider_for
from codehosts.pulls import task_url
from tasks.models import LineComment, Task

# GitHub's status for lines its diff does not show (and other refusals of the body).
UNPROCESSABLE = 422
REPLY_MAX = 65_536  # GitHub's longest comment; a longer answer is cut here


def line_comment_post(*, comment_id: int, host=None) -> str:
    """Post the line comment to its task's pull request once; return what was done.

    Nothing happens for a project without a code host, a task without a pull request, or
    a comment posted already. Raises the provider's ``HostError`` when the host cannot be
    asked or refuses otherwise than the lines: the caller (a job) retries or logs it.
    """
    comment = (
        LineComment.objects.select_related("attempt__task__project", "author")
        .filter(pk=comment_id)
        .first()
    )
    if comment is None:
        return "no such comment"
    task = comment.attempt.task
    if (task.project.code_host or {}).get("provider", "none") == "none":
        return "no code host"
    link = TaskPullRequest.objects.filter(task=task).first()
    if link is None:
        return f"{task.key}: no pull request to comment on"
    done = (link.posted.get("lines") or {}).get(str(comment.pk)) or {}
    if "id" in done:
        return f"{comment.where}: posted already as {done['as']} {done['id']}"
    host = host or provider_for(task.project)
    if done.get("tried"):
        # A post was sent and its answer lost: the host may hold it already.
        found = host.comment_marked(link.number, marker(comment))
        if found is not None:
            kind, made = found
            why = {"why": done["why"]} if kind == "comment" and done.get("why") else {}
            _record(link, comment, {"as": kind, "id": made.id, "url": made.url, **why})
            return f"{comment.where}: {kind} {made.id} on #{link.number} was posted already"
    commit = (comment.attempt.change or {}).get("commit") or ""
    pull = host.pull_request(link.number)
    why = ""
    if pull.head_sha != commit:
        why = f"pull request #{pull.number} no longer shows {comment.attempt}'s commit"
    else:
        _record(link, comment, {"tried": True})
        try:
            made = host.review_comment(
                link.number,
                body=_marked(review_body(comment), comment),
                commit=commit,
                path=comment.path,
                line=comment.end_line,
                start_line=comment.line if comment.line != comment.end_line else None,
                side=comment.side,
            )
        except Refused as refused:
            if refused.status != UNPROCESSABLE:
                raise
            why = f"the host refused the lines: {refused.detail}"
        else:
            _record(link, comment, {"as": "review", "id": made.id, "url": made.url})
            return f"{comment.where}: review comment {made.id} on #{link.number}"
    _record(link, comment, {"tried": True, "why": why})
    made = host.comment(link.number, fallback_body(comment, why))
    _record(link, comment, {"as": "comment", "id": made.id, "url": made.url, "why": why})
    return f"{comment.where}: comment {made.id} on #{link.number} ({why})"


def line_comments_post_pending(*, task_id: int, host=None) -> list[str]:
    """Post the line comments on the task's current attempt that its pull request does not
    show yet: those written while it had none (the host was down when the attempt was
    submitted, so the comment's own job found nothing to comment on). Called after each
    sync of the pull request; what each post did, in comment order."""
    task = Task.objects.select_related("project").filter(pk=task_id).first()
    if task is None or task.current_attempt_id is None:
        return []
    link = TaskPullRequest.objects.filter(task=task).first()
    if link is None:
        return []
    done = {key for key, made in (link.posted.get("lines") or {}).items() if "id" in made}
    waiting = (
        LineComment.objects.filter(attempt_id=task.current_attempt_id)
        .exclude(pk__in=[int(key) for key in done])
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    return [line_comment_post(comment_id=pk, host=host) for pk in waiting]


def marker(comment: LineComment) -> str:
    """What finds the comment on the host again (a post whose answer was lost)."""
    return f"<!-- factory-memory:line-comment {comment.attempt.task.key} {comment.pk} -->"


def reviewer(comment: LineComment) -> str:
    """The reviewer's name here, in a code span: a name such as ``@octo-org/all`` must not
    mention anyone on the host, nor be taken as markup."""
    name = comment.author.get_full_name() or comment.author.get_username()
    return f"`{_spanned(name)}`"


def review_body(comment: LineComment) -> str:
    """The review comment: who wrote it here, on which attempt and task (a link to its
    page), and their words quoted."""
    task = comment.attempt.task
    lines = [
        f"{reviewer(comment)} on Factory Memory, reviewing {comment.attempt} of "
        f"[{task.key}]({task_url(task)}):",
        "",
    ]
    lines += [f"> {line}" for line in comment.body.splitlines()]
    return "\n".join(lines)


def _marked(text: str, comment: LineComment) -> str:
    return f"{text}\n\n{marker(comment)}"


def fallback_body(comment: LineComment, why: str) -> str:
    """The plain comment when the lines cannot carry it: the file and lines named first."""
    lines = f"{comment.line}" + (f"-{comment.end_line}" if comment.end_line != comment.line else "")
    side = "the original's lines" if comment.side == "old" else "the changed file's lines"
    where = f"On `{_spanned(comment.path)}:{lines}` ({side}):"
    text = "\n".join([where, review_body(comment), "", f"(Not on the lines: {why}.)"])
    return _marked(text, comment)


def _spanned(text: str) -> str:
    return text.replace("`", "'")


def _record(link: TaskPullRequest, comment: LineComment, made: dict) -> None:
    def merge(now: dict) -> dict:
        return {**now, "lines": {**(now.get("lines") or {}), str(comment.pk): made}}

    link.record(merge)


def line_comment_replies_sync(*, task: Task, pull, host) -> str:
    """Keep the replies in the threads of the site's review comments on ``task``'s pull
    request ``pull`` (as the host answered it now) as the host shows them: new ones kept,
    edited ones changed, deleted ones deleted; return what was done. The site's own
    account's comments (the pull request's author) are not replies. Read from the host
    (``review_comments``, every page), never from a delivery's payload.
    """
    link = TaskPullRequest.objects.filter(task=task, number=pull.number).first()
    posted = (link.posted.get("lines") or {}) if link is not None else {}
    ours = {
        made["id"]: int(key)
        for key, made in posted.items()
        if made.get("as") == "review" and isinstance(made.get("id"), int)
    }
    if not ours:
        return f"{task.key}: no line comment of the site's on #{pull.number}"
    replies = [
        found
        for found in host.review_comments(pull.number)
        if found.in_reply_to in ours and found.author.login != pull.author
    ]
    with transaction.atomic():
        for found in replies:
            LineCommentReply.objects.update_or_create(
                comment_id=ours[found.in_reply_to],
                host_id=found.id,
                defaults={
                    "author_login": found.author.login[:39],
                    "author_host_id": found.author.id or None,
                    "body": found.body[:REPLY_MAX],
                    # Only a web address is a link on the page (never javascript: or data:).
                    "url": found.url if found.url.startswith(("https://", "http://")) else "",
                    "written_at": _when(found.written_at),
                },
            )
        gone, _ = (
            LineCommentReply.objects.filter(comment_id__in=ours.values())
            .exclude(host_id__in=[found.id for found in replies])
            .delete()
        )
    return f"{task.key}: {len(replies)} replies to line comments on #{pull.number}" + (
        f", {gone} deleted there" if gone else ""
    )


def _when(text: str):
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None
    except ValueError:
        return None
