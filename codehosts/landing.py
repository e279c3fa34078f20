"""The code host's side of landing through a pull request (``landing.mode: pull_request``,
ADR 0041): ``HostLanding`` is the ``landing.through_host.Host`` the lander calls, built on
the project's provider and registered at start (``CodehostsConfig.ready``); and
``target_check``, what the kernel asks at save about the target branch.

Every provider error is turned into the lander's own: ``HostTrouble`` when the host could
not answer or act now (5xx, a time-out, a rate limit, credentials this process lacks),
``HostRefused`` when it understood and refused, with its words.
"""

import logging
from datetime import datetime

from django.db.models import Q

from codehosts.models import HostDelivery, TaskPullRequest
from codehosts.providers import (
    Forbidden,
    HostError,
    NotFound,
    PullRequest,
    RateLimited,
    Refused,
    Unavailable,
    Unconfigured,
    provider_for,
    provider_from,
)
from codehosts.pulls import CHECK_PREFIX, REVIEW_CHECK, pull_request_sync, task_url
from codehosts.pushes import pull_request_pushed
from codehosts.services import CHECK_NEWS, HostUnavailable
from landing.through_host import Checks, HostRefused, HostTrouble, Pull, Queued
from projects.errors import Conflict
from tasks.models import Attempt, Task

logger = logging.getLogger(__name__)
# The runner's verification, as the gate's check run is named (``factory-memory/runner``).
RUNNER_CHECK = f"{CHECK_PREFIX}runner"
METHODS = {"squash": "squash", "merge": "merge"}


def _host_call(call):
    """``call()``, its provider errors as the lander's."""
    try:
        return call()
    except (Unavailable, RateLimited, Unconfigured) as exc:
        raise HostTrouble(f"the code host could not answer: {exc.detail}") from None
    except (NotFound, Forbidden, Refused) as exc:
        raise HostRefused(exc.detail) from None
    except HostError as exc:
        raise HostTrouble(f"the code host's answer could not be used: {exc.detail}") from None


class HostLanding:
    """One project's pull requests, as the lander needs them (``landing.through_host.Host``)."""

    def __init__(self, project):
        self.project = project
        self.host = _host_call(lambda: provider_for(project))
        self._pulls: dict[int, PullRequest] = {}
        self._read_now: dict = {}  # a branch's protection just read, for the next look

    def pull_request(self, attempt: Attempt) -> Pull:
        """The task's pull request read from the host now, by the number the site keeps
        (a merged or closed one too: the settling of a dead lander asks about it); the
        site's sync opens it first when the site has none yet, or only an earlier
        attempt's from another branch."""
        link = TaskPullRequest.objects.filter(task_id=attempt.task_id).first()
        if link is None:
            _host_call(lambda: pull_request_sync(task_id=attempt.task_id, host=self.host))
            link = TaskPullRequest.objects.filter(task_id=attempt.task_id).first()
        if link is None:
            raise HostRefused(
                f"{attempt.task.key} has no pull request on the host: its attempt names no branch"
            )
        pull = _host_call(lambda: self.host.pull_request(link.number))
        branch = (attempt.change or {}).get("branch")
        if branch and pull.head_ref != branch and not pull.merged:
            # The site knows an earlier attempt's pull request (the sync of this one has not
            # run yet, or failed): the sync opens this attempt's own and closes that one.
            _host_call(lambda: pull_request_sync(task_id=attempt.task_id, host=self.host))
            link = TaskPullRequest.objects.get(task_id=attempt.task_id)
            pull = _host_call(lambda: self.host.pull_request(link.number))
        if pull.state == "open" and pull.draft:
            # Approved and queued: ready for review (the host merges no draft).
            pull = _host_call(lambda: self.host.set_draft(pull, False))
        return self._known(pull)

    def revert_pull_request(self, attempt: Attempt, *, branch: str, title: str, body: str) -> Pull:
        """The revert's own pull request from ``branch`` into the project's target, ready
        for review: found on the host by its branch and its marker (``revert-KEY``, which
        names no task, so its deliveries change no task), else opened."""
        pull = _host_call(
            lambda: self.host.open_or_update_pull_request(
                task=f"revert-{attempt.task.key}",
                head=branch,
                base=self.project.landing_target,
                title=title,
                body=f"{body}\n\n{task_url(attempt.task)}",
                draft=False,
            )
        )
        return self._known(pull)

    def has_merge_queue(self, branch: str) -> bool:
        protection = _host_call(lambda: self.host.protection(branch))
        self._read_now[branch] = protection  # the first look at the checks reads no more
        return protection.merge_queue

    def queued(self, pull: Pull) -> Queued | None:
        entry = _host_call(lambda: self.host.queue_entry(pull.number))
        if entry is None:
            return None
        return Queued(state=entry.state, head=entry.head_sha, base=entry.base_sha)

    def enqueue(self, pull: Pull, *, head: str) -> None:
        known = self._provider_pull(pull)
        _host_call(lambda: self.host.enqueue_pull_request(known, expected_head_sha=head))

    def dequeue(self, pull: Pull) -> None:
        known = self._provider_pull(pull)
        _host_call(lambda: self.host.dequeue_pull_request(known))

    def pull(self, number: int) -> Pull:
        return self._known(_host_call(lambda: self.host.pull_request(number)))

    def take_push(self, attempt: Attempt, pull: Pull) -> str:
        """A member's push that moved the head becomes their attempt now, while the lander
        still holds the change (``codehosts.pushes``, ``by_the_lander``); the pull request
        read again, so the push judged is the head there now."""
        try:
            now = self.host.pull_request(pull.number)
            text, _ = pull_request_pushed(
                task=Task.objects.get(pk=attempt.task_id), pull=now, host=self.host,
                by_the_lander=True,
            )  # fmt: skip
        except (HostError, Conflict) as exc:
            # The change goes back either way; the next sync of the pull request looks again.
            logger.warning("%s: a push could not be taken now: %s", attempt, exc)
            return ""
        return text

    def _provider_pull(self, pull: Pull) -> PullRequest:
        """The provider's answer for ``pull``: the one this landing read last, else read now."""
        return self._pulls.get(pull.number) or _host_call(
            lambda: self.host.pull_request(pull.number)
        )

    def _known(self, pull: PullRequest) -> Pull:
        self._pulls[pull.number] = pull
        return Pull(
            number=pull.number,
            branch=pull.head_ref,
            head=pull.head_sha,
            base=pull.base_ref,
            open=pull.state == "open",
            merged=pull.merged,
            merge_commit=pull.merge_commit_sha or "",
            url=pull.url,
        )

    def post_checks(
        self, attempt: Attempt, commit: str, *, runner: str, review: str, passed: bool = True
    ) -> None:
        """The lander's verification and the review on the verified commit: success, or
        failure when not ``passed``."""
        url = task_url(attempt.task)
        verdict = "passed" if passed else "failed"
        for name, summary in ((RUNNER_CHECK, runner), (REVIEW_CHECK, review)):
            _host_call(
                lambda name=name, summary=summary: self.host.check_run(
                    name=name,
                    head_sha=commit,
                    status="completed",
                    conclusion="success" if passed else "failure",
                    title=f"{name.removeprefix(CHECK_PREFIX)}: {verdict} on the built commit",
                    summary=summary,
                    details_url=url,
                )
            )

    def checks(self, branch: str, commit: str) -> Checks:
        protection = self._read_now.pop(branch, None) or _host_call(
            lambda: self.host.protection(branch)
        )
        states = _host_call(lambda: self.host.commit_checks(commit))
        return Checks(required=tuple(protection.required_checks), states=states)

    def heard_of_checks(self, commit: str, *, since: datetime) -> bool:
        """A delivery kept since ``since`` about a check run, a check suite or a commit
        status on ``commit`` (``codehosts.services`` keeps its commit in ``subject``)."""
        news = Q()
        for key in CHECK_NEWS:
            news |= Q(**{f"subject__{key}": commit})
        return (
            HostDelivery.objects.filter(project=self.project, received_at__gte=since)
            .filter(news)
            .exists()
        )

    def merge(self, pull: Pull, *, sha: str, method: str, title: str, message: str) -> str:
        """Merge pinned to ``sha``; the commit the host made on the target."""
        known = self._provider_pull(pull)
        merged = _host_call(
            lambda: self.host.merge(
                known, sha=sha, method=METHODS[method], title=title, message=message
            )
        )
        return merged.sha


def target_check(code_host: dict, branch: str) -> None:
    """Whether the site may land on ``branch`` through pull requests: through its merge
    queue, where it has one; else its protection must require a branch to be up to date
    before merging (strict: the verified commit is merged only on the tip it was built
    on). Raises ``Conflict`` (409) saying why,
    or ``HostUnavailable`` (503) when the host cannot be asked; one try, no waiting."""
    try:
        protection = provider_from(code_host, retries=0, max_wait=0).protection(branch)
    except Unconfigured as exc:
        raise Conflict(exc.detail, code="code_host_unconfigured") from None
    except (Forbidden, NotFound) as exc:
        raise Conflict(
            f"the code host would not show the protection of {branch}: {exc.detail}",
            code="code_host_permissions",
            extra={"missing": list(getattr(exc, "missing", ()))},
        ) from None
    except (Unavailable, RateLimited, HostError) as exc:
        raise HostUnavailable(
            f"the code host could not be asked about {branch}'s protection ({exc.detail}); "
            "nothing was saved: try again"
        ) from None
    if protection.merge_queue:
        return  # the queue builds each merge group on the target as it is
    if not protection.strict:
        raise Conflict(
            f"{branch} must require branches to be up to date before merging (strict status "
            "checks): otherwise the host could merge the verified commit onto a target that "
            "moved, which nobody verified",
            code="landing_target_not_strict",
        )
