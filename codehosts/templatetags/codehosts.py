"""How pages name a code host's account: ``{{ login|on_host:project }}``."""

from django import template

from codehosts.identities import shown

register = template.Library()


@register.filter
def on_host(login: str, project) -> str:
    """The member the host's account ``login`` is (``codehosts.identities.user_for``), or
    the login marked as the host's (``octocat on GitHub``): never anyone here by name."""
    return shown(project, login or "")
