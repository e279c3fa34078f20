"""The code host behind a project (ADR 0030): ``provider_for(project)`` gives the one
``CodeHost`` the rest of the site calls, ``NoHost`` for ``{"provider": "none"}``."""

import os

from django.conf import settings

from codehosts.providers.base import (
    Access,
    Annotation,
    CheckRun,
    CodeHost,
    Comment,
    Forbidden,
    HostError,
    HostUser,
    Issue,
    Merged,
    NotFound,
    Protection,
    PullRequest,
    QueueEntry,
    RateLimited,
    Refused,
    Repository,
    ReviewComment,
    Unavailable,
    Unconfigured,
)
from codehosts.providers.none import NoHost
from projects import hosts

__all__ = [
    "Access",
    "Annotation",
    "CheckRun",
    "CodeHost",
    "Comment",
    "Forbidden",
    "HostError",
    "HostUser",
    "Issue",
    "Merged",
    "NoHost",
    "NotFound",
    "Protection",
    "PullRequest",
    "QueueEntry",
    "RateLimited",
    "Refused",
    "Repository",
    "ReviewComment",
    "Unavailable",
    "Unconfigured",
    "provider_for",
    "provider_from",
]


def provider_for(project, **options) -> CodeHost:
    """The project's code host (``provider_from`` its ``code_host`` block)."""
    return provider_from(project.code_host or {}, **options)


def provider_from(code_host: dict, **options) -> CodeHost:
    """The code host a (cleaned) ``code_host`` block names, with its credentials read from the environment variables
    the block names (and, for an App's key, the ``_PREVIOUS`` one while it is rotated).

    The secrets go to the provider's client and nowhere else: not into its ``repr``, an
    exception's text or a log line. Raises ``Unconfigured`` naming (only) the variables
    this process does not set. ``options`` override the operator's timeouts and retries.
    """
    if code_host.get("provider", "none") == "none":
        return NoHost()
    if code_host["api_url"].rstrip("/") not in hosts.api_urls():
        # Checked at save; checked again here, since the operator's list may have shrunk.
        raise Unconfigured(f"{code_host['api_url']} is not an API base this site allows")
    names = [code_host[n] for n in ("token_env", "private_key_env") if n in code_host]
    unset = [name for name in names if not os.environ.get(name, "").strip()]
    if unset:
        raise Unconfigured(f"this process does not set {', '.join(unset)}")
    # lazy: githubkit and its models (~50 MB) load only when a GitHub host is called
    from codehosts.providers.github import GitHubHost

    configured = {
        "timeout": settings.FACTORY_CODE_HOST_TIMEOUT_SECONDS,
        "retries": settings.FACTORY_CODE_HOST_RETRIES,
        "max_wait": settings.FACTORY_CODE_HOST_MAX_WAIT_SECONDS,
        "backoff": settings.FACTORY_CODE_HOST_BACKOFF_SECONDS,
        **options,
    }
    if "token_env" in code_host:
        return GitHubHost(
            api_url=code_host["api_url"],
            repository=code_host["repository"],
            token=os.environ[code_host["token_env"]].strip(),
            **configured,
        )
    name = code_host["private_key_env"]
    return GitHubHost(
        api_url=code_host["api_url"],
        repository=code_host["repository"],
        app_id=code_host["app_id"],
        installation_id=code_host["installation_id"],
        private_keys=(
            os.environ[name].strip(),
            os.environ.get(f"{name}{hosts.PREVIOUS}", "").strip(),
        ),
        **configured,
    )
