"""A reviewer's comments on lines of an attempt's diff, written while it waits for review,
resolved by hand or when a later attempt changes the lines (``comments_resolve_changed``,
in the submission's transaction).
"""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from evidence.viewers import diff_lines
from projects.errors import Conflict, PermissionDenied
from projects.kinds import Kind
from projects.models import Event
from projects.roles import REVIEWER_NOT_HOLDER, Role, Rule, role_rule
from projects.services import check_storable
from tasks import selectors
from tasks.models import Attempt, AttemptState, LineComment
from tasks.services import lock_task_and_attempt


def _lines_of(attempt: Attempt) -> dict:
    diff = selectors.commented_diff(attempt.evidence.filter(kind=Kind.DIFF).order_by("id"))
    if diff is None:
        return {}
    try:
        return diff_lines(diff)
    except ValidationError:
        return {}


def comment_add(
    *, attempt: Attempt, actor, path: str, line: int, end_line=None, side="new", body: str
) -> LineComment:
    """A reviewer's comment on lines of the attempt's diff, while it waits for review.

    Refused: anyone but a reviewer of the project who did not submit it (403
    ``own_work``), an attempt not in review (409 ``invalid_state``: nothing after the
    verdict), a file the diff does not change or lines it does not show (400 naming
    ``path`` or ``line``), an empty or longer than ``FACTORY_COMMENT_MAX_CHARS`` body.
    """
    body = (body or "").strip()
    end_line = line if end_line is None else end_line
    if isinstance(line, int) and isinstance(end_line, int) and end_line < line:
        line, end_line = end_line, line  # the same lines, named last one first
    errors = {}
    if side not in ("new", "old"):
        errors["side"] = "new (the changed file's lines) or old (the original's)"
    if not body:
        errors["body"] = "say what is wrong"
    elif len(body) > settings.FACTORY_COMMENT_MAX_CHARS:
        errors["body"] = f"at most {settings.FACTORY_COMMENT_MAX_CHARS} characters"
    if not isinstance(line, int) or line < 1 or not isinstance(end_line, int):
        errors["line"] = "a line from 1"
    if errors:
        raise ValidationError(errors)
    check_storable(body, "body")
    with transaction.atomic():
        _, attempt = lock_task_and_attempt(attempt.pk)
        # Who may comment is who may judge the attempt: the rule of its review transitions.
        if refused := REVIEWER_NOT_HOLDER.refusal(attempt, actor):
            code, reason = refused
            raise PermissionDenied(reason, code=code)
        if attempt.state != AttemptState.PASSED:
            raise Conflict(
                f"{attempt} is {attempt.state}: comments are written while it waits for review",
                code="invalid_state",
                extra={"state": attempt.state},
            )
        files = _lines_of(attempt)
        if not files:
            raise ValidationError({"path": f"{attempt} has no diff to comment on"})
        if path not in files:
            raise ValidationError({"path": f"{attempt}'s diff does not change {path[:200]}"})
        lines = files[path]
        shown, changed = (lines.new, lines.added) if side == "new" else (lines.old, lines.removed)
        missing = [n for n in range(line, end_line + 1) if n not in shown]
        if missing:
            raise ValidationError(
                {"line": f"the diff does not show line {missing[0]} of {path} ({side} side)"}
            )
        quote = [[n, shown[n], n in changed] for n in range(line, end_line + 1)]
        comment = LineComment.objects.create(
            attempt=attempt,
            author=actor,
            path=path,
            side=side,
            line=line,
            end_line=end_line,
            body=body,
            quote=quote,
        )
        Event.record(comment, actor=actor, transition="comment", from_state="", to_state="open")
    return comment


def _resolver_refusal(attempt: Attempt, user):
    if refused := role_rule(Role.REVIEWER).refusal(attempt, user):
        return refused
    if Attempt.objects.filter(task_id=attempt.task_id, agent=user).exists():
        return ("own_work", "you worked on this task; another reviewer must resolve its comments")
    return None


# Who resolves comments on an attempt's lines: a reviewer of the project who is no agent of
# any attempt of the task (the work's author does not close its own review).
RESOLVER = Rule(_resolver_refusal, "resolver")


def comment_resolve(*, comment: LineComment, actor) -> LineComment:
    """Mark a comment resolved by hand: reviewers of the project, once, and never an agent
    of an attempt of the task (403 ``own_work``): the work's author does not close its
    own review."""
    if refused := RESOLVER.refusal(comment.attempt, actor):
        code, reason = refused
        raise PermissionDenied(reason, code=code)
    with transaction.atomic():
        comment = LineComment.objects.select_for_update(no_key=True, of=("self",)).get(
            pk=comment.pk
        )
        if comment.resolved_at is not None:
            raise Conflict(f"{comment} is already resolved", code="invalid_state")
        comment.resolved_at = timezone.now()
        comment.resolved_reason = f"resolved by {actor.get_username()}"
        comment.save(update_fields=["resolved_at", "resolved_reason"])
        Event.record(
            comment, actor=actor, transition="resolve", from_state="open", to_state="resolved"
        )
    return comment


def _lines_changed(comment: LineComment, files: dict) -> bool:
    """Whether ``files`` (a later attempt's diff) shows the commented lines otherwise than
    the commented attempt's did. Both diffs start from the task's base: a line neither of
    them changes is the base's in both; a line one of them changed must read the same in
    the other, or it was changed."""
    lines = files.get(comment.path)
    for number, text, was_changed in comment.quote:
        if comment.side == "old":
            if (lines is not None and number in lines.removed) != was_changed:
                return True
            continue
        shown = lines is not None and number in lines.new
        now = (lines.new[number], number in lines.added) if shown else (None, False)
        if (was_changed or now[1]) and now != (text, was_changed):
            return True
    return False


def comments_resolve_changed(attempt: Attempt) -> int:
    """In the submit's transaction: resolve the open comments on earlier attempts of the
    task whose lines this attempt's diff changes (``_lines_changed``); a comment it does
    not reach is resolved by hand."""
    open_comments = list(
        LineComment.objects.filter(
            attempt__task_id=attempt.task_id, attempt__number__lt=attempt.number, resolved_at=None
        )
    )
    if not open_comments:
        return 0
    files = _lines_of(attempt)
    now, resolved = timezone.now(), 0
    for comment in open_comments:
        if not _lines_changed(comment, files):
            continue
        comment.resolved_at, comment.resolved_by = now, attempt
        comment.resolved_reason = f"{attempt} changed these lines"
        comment.save(update_fields=["resolved_at", "resolved_by", "resolved_reason"])
        Event.record(
            comment,
            actor=None,
            transition="resolve",
            from_state="open",
            to_state="resolved",
            reason=comment.resolved_reason,
        )
        resolved += 1
    return resolved
