"""How pages name a code host's account (``{{ login|on_host:project }}``) and show what
people answered there (``{% line_comment_replies comments project as replies %}``, then
``{{ replies|replies_to:comment.pk }}``)."""

from django import template

from codehosts.identities import shown
from codehosts.models import LineCommentReply

register = template.Library()


@register.filter
def on_host(login: str, project) -> str:
    """The member the host's account ``login`` is (``codehosts.identities.user_for``), or
    the login marked as the host's (``octocat on GitHub``): never anyone here by name."""
    return shown(project, login or "")


@register.simple_tag
def line_comment_replies(comments, project) -> dict[int, list[LineCommentReply]]:
    """The host's replies to ``comments`` by comment, oldest first, in one query; each
    with ``shown``, its author as ``on_host`` names them."""
    found: dict[int, list[LineCommentReply]] = {}
    replies = LineCommentReply.objects.filter(comment_id__in=[c.pk for c in comments])
    for reply in replies.order_by("written_at", "host_id"):
        reply.shown = shown(project, reply.author_login, host_id=reply.author_host_id)
        found.setdefault(reply.comment_id, []).append(reply)
    return found


@register.filter
def replies_to(replies: dict, comment_id: int) -> list:
    return replies.get(comment_id, [])
