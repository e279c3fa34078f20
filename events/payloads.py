"""What a receiver is told about an event: enough to act without calling back.

``envelope(event, subject, type)`` is the JSON every face sends (webhooks, the live
stream): ``{id, type, time, actor, project, data: {key, url, api_url, …}}``, where ``id``
is the audit Event's id. It is built from the rows as they are when the event is written
(inside its transaction, for the outbox), so a later change does not rewrite it; its
states are the ones the event reached (the stream builds it later).
"""

from django.conf import settings

from decisions.models import Decision, SpecVersion
from evidence.models import GateRun
from landing.models import FlakyTest, Lander
from projects.models import Event, Project
from tasks.models import Attempt, Task
from tasks.usage import shown as usage_shown
from tasks.usage import shown_with_void


def site(path: str) -> str:
    return settings.SITE_URL.rstrip("/") + path


def envelope(event: Event, subject, type_name: str, *, project_slug: str | None = None) -> dict:
    if project_slug is None:
        project_slug = Project.objects.only("slug").get(pk=event.project_id).slug
    data = {"from_state": event.from_state, "to_state": event.to_state, "reason": event.reason}
    data.update(_data(subject, event, type_name))
    return {
        "id": event.pk,
        "type": type_name,
        "time": event.created_at.isoformat().replace("+00:00", "Z"),
        "actor": event.actor.get_username() if event.actor_id else None,
        "project": project_slug,
        "data": data,
    }


def _task_urls(key: str) -> dict:
    return {"url": site(f"/tasks/{key}/"), "api_url": site(f"/api/v1/tasks/{key}/")}


def _attempt(attempt: Attempt | None) -> dict | None:
    if attempt is None:
        return None
    return {
        "id": attempt.pk,
        "number": attempt.number,
        "agent": attempt.agent.get_username(),
        "state": attempt.state,
        "api_url": site(f"/api/v1/attempts/{attempt.pk}/"),
    }


def _change(attempt: Attempt | None) -> dict:
    change = (attempt.change if attempt else None) or {}
    return {k: change[k] for k in ("commit", "branch", "url") if change.get(k)}


def _failed_gates(attempt: Attempt) -> list[dict]:
    runs = GateRun.objects.filter(attempt=attempt, state__in=["failed", "error"]).order_by("gate")
    return [{"gate": r.gate, "state": r.state, "summary": r.summary} for r in runs]


def _data(subject, event: Event, type_name: str) -> dict:
    if isinstance(subject, Task):
        return _task(subject, event, type_name)
    if isinstance(subject, Attempt):
        data = {"key": subject.task.key, "title": subject.task.title}
        data.update(_task_urls(subject.task.key))
        data["attempt"] = _attempt(subject)
        data["change"] = _change(subject)
        if type_name == "attempt.submitted":
            data["summary"] = subject.summary
        elif type_name == "attempt.gates_failed":
            data["gates"] = _failed_gates(subject)
        elif type_name == "budget.exhausted":
            data.update(_budget(event))
            data["usage"] = usage_shown(subject.usage)
        elif type_name == "usage.voided":
            data["voided"] = shown_with_void(subject.usage, subject.usage_voided)["voided"]
            data["month"] = (event.extra or {}).get("month")
        elif type_name == "lease.expired":
            data["lease_expired_at"] = (
                subject.lease_expires_at.isoformat() if subject.lease_expires_at else None
            )
        return data
    if isinstance(subject, GateRun):
        attempt = subject.attempt
        data = {"key": attempt.task.key, "gate": subject.gate, "state": event.to_state}
        data.update(_task_urls(attempt.task.key))
        data["summary"] = subject.summary
        data["attempt"] = _attempt(attempt)
        data["change"] = _change(attempt)
        return data
    if isinstance(subject, Decision):
        return {
            "key": subject.key,
            "title": subject.title,
            "state": event.to_state,
            "url": site(f"/decisions/{subject.key}/"),
            "api_url": site(f"/api/v1/decisions/{subject.key}/"),
            "decided_by": subject.decided_by.get_username() if subject.decided_by_id else None,
        }
    if isinstance(subject, SpecVersion):
        spec = subject.spec
        return {
            "key": spec.key,
            "title": spec.title,
            "version": subject.number,
            "url": site(f"/specs/{spec.key}/"),
            "api_url": site(f"/api/v1/specs/{spec.key}/"),
            "source_decision": (
                subject.source_decision.key if subject.source_decision_id else None
            ),
        }
    if isinstance(subject, (Lander, FlakyTest)):
        slug = Project.objects.only("slug").get(pk=subject.project_id).slug
        data = {
            "key": slug if isinstance(subject, Lander) else subject.test,
            "url": site(f"/projects/{slug}/landing/"),
            "api_url": site(f"/api/v1/projects/{slug}/landing/"),
        }
        if type_name == "landing.paused":
            data["until"] = (event.extra or {}).get("until")
        return data
    if isinstance(subject, Project) and type_name == "budget.exhausted":
        return {
            "key": subject.slug,
            "url": site(f"/tasks/?project={subject.slug}"),
            "api_url": site(f"/api/v1/projects/{subject.slug}/"),
            **_budget(event),
            "month": (event.extra or {}).get("month"),
            "task": (event.extra or {}).get("task"),
        }
    return {"key": event.object_key}


def _budget(event: Event) -> dict:
    """Which budget was reached, what was spent and the budget, as decimal strings."""
    extra = event.extra or {}
    return {name: extra.get(name) for name in ("scope", "spent_usd", "budget_usd")}


def _task(task: Task, event: Event, type_name: str) -> dict:
    # The state the event reached: the stream builds this later, when the task may have moved.
    data = {"key": task.key, "title": task.title, "state": event.to_state}
    data.update(_task_urls(task.key))
    number = (event.extra or {}).get("attempt") or task.attempt_count
    attempt = None
    if number:
        attempt = Attempt.objects.select_related("agent").filter(task=task, number=number).first()
    data["attempt"] = _attempt(attempt)
    data["change"] = _change(attempt)
    if type_name in ("task.approved", "task.rejected"):
        data["verdict"] = "approve" if type_name == "task.approved" else "reject"
        data["reviewer"] = event.actor.get_username() if event.actor_id else None
    elif type_name == "task.landed":
        data["landed_commit"] = (event.extra or {}).get("commit") or task.landed_commit
        data["batch"] = (event.extra or {}).get("batch")
    elif type_name == "landing.failed" and attempt is not None:
        landing = attempt.landing or {}
        data["landing"] = {
            key: landing[key]
            for key in ("state", "reason", "paths", "failing", "with", "base")
            if key in landing
        }
    elif type_name == "landing.reverted":
        extra = event.extra or {}
        revert = ((attempt.landing or {}).get("revert") or {}) if attempt is not None else {}
        data["reverted"] = {key: extra.get(key) for key in ("reverts", "commit", "batch", "by")}
        data["reverted"]["reason"] = revert.get("reason", "")
    elif type_name == "landing.fast_lane":
        data["alone"] = bool((event.extra or {}).get("alone"))
    elif type_name == "task.failed":
        data["gates"] = _failed_gates(attempt) if attempt else []
    elif type_name == "task.in_review" and attempt is not None:
        data["gates"] = [
            {"gate": r.gate, "state": r.state, "summary": r.summary}
            for r in GateRun.objects.filter(attempt=attempt).order_by("gate")
        ]
    return data
