"""Webhooks in: the one place a code host's delivery is checked and kept.

``delivery_receive`` finds the project that follows the delivery's repository on the
host it came from, checks the signature against that project's webhook secrets, and
keeps the delivery once (``HostDelivery``). Whatever is refused is refused before anything is
written, and a refusal for a bad signature reads the same whether or not a project
follows the repository: the answer tells a stranger nothing about what is followed.
"""

import hashlib
import json
import logging
from dataclasses import dataclass

from django.db import IntegrityError, transaction

from codehosts.models import HostDelivery
from codehosts.providers import (
    Forbidden,
    HostError,
    NotFound,
    RateLimited,
    Unavailable,
    Unconfigured,
    provider_from,
)
from codehosts.signatures import signed_by
from projects import hosts
from projects.errors import Conflict, ServiceError
from projects.models import Project
from projects.queue import enqueue_on_commit

logger = logging.getLogger(__name__)

GITHUB = "github"
PROCESS_JOB = "codehosts.jobs.delivery_process_job"
# A delivery's header names are GitHub's; so are its ids' and event names' shapes.
MAX_NAME = 100


class HostUnavailable(ServiceError):
    """The host could not be asked (down, too slow, rate limited): nothing was saved (503)."""

    status = 503
    default_code = "code_host_unavailable"


def code_host_reach(code_host: dict) -> None:
    """Ask the host whether the block's credentials can do what the site will do there.

    Raises ``Conflict`` 409 ``code_host_permissions`` with ``missing`` (each permission as
    GitHub names it) when they fall short or the host refuses them, 409
    ``code_host_unconfigured`` when this process cannot use them, and ``HostUnavailable``
    (503) when the host cannot be asked now. A web request waits for this, so the host
    gets one try and no rate-limit wait.
    """
    try:
        access = provider_from(code_host, retries=0, max_wait=0).check_access()
    except Unconfigured as exc:
        raise Conflict(exc.detail, code="code_host_unconfigured") from None
    except (Forbidden, NotFound) as exc:
        missing = list(getattr(exc, "missing", ()))
        raise Conflict(
            f"the code host refused these credentials: {exc.detail}",
            code="code_host_permissions",
            extra={"missing": missing},
        ) from None
    except (Unavailable, RateLimited, HostError) as exc:
        raise HostUnavailable(
            f"the code host could not be asked about these credentials ({exc.detail}); "
            "nothing was saved: try again"
        ) from None
    if access.missing:
        raise Conflict(
            f"the code host's credentials lack: {', '.join(access.missing)}",
            code="code_host_permissions",
            extra={"missing": list(access.missing)},
        )


class Unsigned(ServiceError):
    """The signature is missing or matches no secret of a project that follows the
    delivery's repository (401)."""

    status = 401
    default_code = "bad_signature"


@dataclass(frozen=True)
class Received:
    delivery: HostDelivery | None  # None: signed, but nothing to keep
    new: bool
    ping: bool = False


def delivery_receive(*, event: str, delivery_id: str, signature: str, body: bytes) -> Received:
    """Check and keep one GitHub delivery; the same delivery id again is not kept twice.

    Raises ``ServiceError`` (400) for a delivery without its headers or whose body is not
    a JSON object, and ``Unsigned`` (401) for a signature that is missing or matches no
    secret of the project following the repository named in the body.
    """
    for header, value in (("X-GitHub-Event", event), ("X-GitHub-Delivery", delivery_id)):
        if not value or len(value) > MAX_NAME or not value.isprintable():
            raise ServiceError(f"{header} is missing or not a delivery's", code="bad_delivery")
    if not signature:
        raise Unsigned("X-Hub-Signature-256 is missing: give the webhook a secret")
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ServiceError("the body is not JSON", code="bad_delivery") from exc
    if not isinstance(payload, dict):
        raise ServiceError("the body is not a JSON object", code="bad_delivery")
    project, repository = _follower(payload)
    followers = [project] if project else _app_followers(payload)
    secrets = [secret for follower in followers for secret in hosts.secrets(follower.code_host)]
    if not signed_by(body, signature, secrets):
        logger.warning(
            "a %s delivery %s for %r is refused: its signature matches no secret",
            event,
            delivery_id,
            repository,
        )
        raise Unsigned(
            "the signature matches no secret of a project following this repository on this host"
        )
    if event == "ping" or project is None:
        # The host checking the address (a new webhook, or an App's own ping), or news of
        # an App's installation, which names no repository: answered, nothing to keep.
        return Received(None, False, ping=event == "ping")
    try:
        with transaction.atomic():
            delivery = HostDelivery.objects.create(
                provider=GITHUB,
                delivery_id=delivery_id,
                event=event,
                action=_text(payload.get("action")),
                project=project,
                subject=_subject(payload, repository),
                body_sha256=hashlib.sha256(body).hexdigest(),
            )
            # Acted on by a job once kept: the answer does not wait for the host (ADR 0038).
            enqueue_on_commit(PROCESS_JOB, delivery.pk, robust=True)
    except IntegrityError:
        return Received(HostDelivery.objects.get(provider=GITHUB, delivery_id=delivery_id), False)
    return Received(delivery, True)


def _follower(payload: dict) -> tuple[Project | None, str]:
    """The project following the repository the delivery names, on the host it came from
    (its API address, ``repository.url``), and that repository's name."""
    repository = payload.get("repository")
    if not isinstance(repository, dict):
        return None, ""
    name, url = _text(repository.get("full_name")), _text(repository.get("url"))
    if not name or not url:
        return None, name
    candidates = Project.objects.filter(
        code_host__provider=GITHUB, code_host__repository__iexact=name
    )
    for project in candidates:
        api = f"{project.code_host['api_url']}/repos/{project.code_host['repository']}"
        if api.lower() == url.lower():
            return project, name
    return None, name


def _app_followers(payload: dict) -> list[Project]:
    """For a delivery naming no repository (an App's ping, an installation's events): the
    projects using that App (``hook.app_id``) or that installation (``installation.id``)."""
    found = Project.objects.none()
    for key, field in (("hook", "app_id"), ("installation", "id")):
        part = payload.get(key)
        number = part.get(field) if isinstance(part, dict) else None
        if isinstance(number, int) and not isinstance(number, bool):
            name = "app_id" if key == "hook" else "installation_id"
            found |= Project.objects.filter(
                code_host__provider=GITHUB, **{f"code_host__{name}": number}
            )
    return list(found)


# The subject's keys naming the commit a check run, a check suite or a commit status is on:
# news the lander waiting for the team's checks wakes on (``codehosts.landing``).
CHECK_NEWS = ("check_run_head_sha", "check_suite_head_sha", "status_sha")


def _subject(payload: dict, repository: str) -> dict:
    """What names the object a delivery is about, to read it again from the host."""
    subject = {"repository": repository}
    for kind in ("pull_request", "issue"):
        found = payload.get(kind)
        number = found.get("number") if isinstance(found, dict) else None
        if isinstance(number, int) and not isinstance(number, bool):
            subject[kind] = number
    for kind in ("check_suite", "check_run", "merge_group"):
        found = payload.get(kind)
        if isinstance(found, dict) and isinstance(found.get("head_sha"), str):
            subject[f"{kind}_head_sha"] = found["head_sha"][:64]
    if isinstance(payload.get("sha"), str) and isinstance(payload.get("state"), str):
        subject["status_sha"] = payload["sha"][:64]  # a commit status names its commit so
    return subject


def _text(value) -> str:
    return value[:MAX_NAME] if isinstance(value, str) else ""
