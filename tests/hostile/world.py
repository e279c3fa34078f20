"""The world every hostile request is aimed at, and what "changes nothing" means.

Shared by the modules of this folder (hostile input fed to every upload and JSON endpoint,
and fields and tokens a caller must not use), by tests/test_hostile_pages.py and by the
route walks that aim at the same endpoints. The fixtures that build the world once for each
module are in this folder's conftest.py.
"""

import json
import os
import struct
from dataclasses import dataclass

from django.apps import apps
from drf_spectacular.generators import SchemaGenerator

from codehosts.models import HostAccount
from decisions import services as decision_services
from decisions.models import Decision, Spec, SpecVersion
from events import services as events_services
from evidence.models import Evidence
from interop import services as interop_services
from projects.models import Event
from tasks import attempts, comments, review
from tasks.models import Attempt, Task
from tests.factories import CRITERIA, Flow, ProjectFactory, all_met

JSON = "application/json"
DIFF_SAMPLE = b"--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"
BOUNDARY = "----factoryHostileBoundary7MA4YWxk"
MULTIPART = f"multipart/form-data; boundary={BOUNDARY}"

SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(1)>"
XSS = SCRIPT + IMG

NUL = "a\x00b"
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + struct.pack(">II", 1, 1) + b"\x08\x02\x00\x00\x00"

# --- What "changes nothing" means -----------------------------------------------------------

COUNTED = (Task, Attempt, Evidence, Decision, Spec, SpecVersion, Event)


def counts() -> dict:
    return {model.__name__: model.objects.count() for model in COUNTED}


def stored_rows() -> dict:
    """Every row of every model (and many-to-many table) of the three apps, by model."""
    rows = {}
    for label in ("tasks", "decisions", "evidence"):
        for model in apps.get_app_config(label).get_models(include_auto_created=True):
            rows[model._meta.label] = list(model._base_manager.order_by("pk").values())
    return rows


def files_in(path) -> set[str]:
    path = str(path)
    return {
        os.path.relpath(os.path.join(directory, name), path)
        for directory, _, names in os.walk(path)
        for name in names
    }


@dataclass
class Snapshot:
    counts: dict
    rows: dict
    media: set

    @classmethod
    def take(cls, settings) -> "Snapshot":
        return cls(counts(), stored_rows(), files_in(settings.MEDIA_ROOT))

    def assert_unchanged(self, settings) -> None:
        assert files_in(settings.FACTORY_UPLOAD_TEMP_DIR) == set(), "a temporary file lingers"
        assert files_in(settings.MEDIA_ROOT) == self.media, "a file was stored"
        assert counts() == self.counts
        now = stored_rows()
        for label, rows in self.rows.items():
            assert now[label] == rows, f"{label} changed"


def assert_refused(response, status: int, code: str, field_name: str | None = None) -> dict:
    """The exact status and code, in the one JSON error format."""
    assert response.status_code == status, response.content[:600]
    assert response["Content-Type"].startswith("application/json"), response.content[:300]
    body = response.json()
    assert isinstance(body.get("detail"), str) and body["detail"], body
    assert body.get("code") == code, body
    if field_name is not None:
        assert field_name in body.get("fields", {}), body
    return body


# --- The world every hostile request is aimed at --------------------------------------------


BEADS_LINE = b'{"id":"bd-1","title":"Imported","status":"open","priority":2}\n'


class World:
    """Project FM with a task in every state an endpoint needs, and an outsider project OT."""

    def __init__(self):
        self.flow = flow = Flow(ProjectFactory(slug="FM"), prefix="fm")
        self.other = Flow(ProjectFactory(slug="OT"), prefix="ot")
        flow.gates({})
        self.subscription = events_services.subscription_create(
            project=flow.project, actor=flow.manager, url="http://127.0.0.1:9/hook"
        )
        self.spec = flow.spec()
        self.review_task, self.review_attempt = flow.in_review(agent=flow.agent2)
        self.task, self.attempt = flow.claimed(agent=flow.agent, spec=self.spec)
        # Usage reported, so a manager may void it.
        attempts.attempt_heartbeat(attempt=self.attempt, actor=flow.agent, usage={"cost_usd": 1})
        # In review with a diff, and a comment on it.
        _, self.commented = flow.claimed(agent=flow.agent2, title="Commented")
        flow.attach(self.commented, DIFF_SAMPLE, kind="diff", name="change.diff")
        attempts.attempt_submit(attempt=self.commented, actor=flow.agent2, summary="s", change={})
        attempts.attempt_gates_passed(attempt=self.commented)
        self.commented.refresh_from_db()
        self.comment = comments.comment_add(
            attempt=self.commented, actor=flow.reviewer, path="x.py", line=1, body="why?"
        )
        # Queued to land: landing is on while it is approved, then off, so nothing else queues.
        flow.project.landing = {**flow.project.landing, "mode": "push"}
        flow.project.save(update_fields=["landing"])
        self.queued, queued_attempt = flow.in_review(agent=flow.agent2, title="Queued")
        review.task_approve(task=self.queued, actor=flow.reviewer, criteria=all_met(queued_attempt))
        flow.project.landing = {**flow.project.landing, "mode": "off"}
        flow.project.save(update_fields=["landing"])
        self.draft = flow.draft(title="Draft")
        # Claimable: a hostile claim that slipped through would take it.
        self.ready = flow.ready(title="Ready")
        self.decision = decision_services.decision_propose(  # the manager decides it
            project=flow.project, actor=flow.reviewer, title="t", context="c", decision="d"
        )
        self.draft_version = decision_services.spec_version_create(
            spec=self.spec, actor=flow.manager, body="v2", criteria=CRITERIA
        )
        self.other_task = self.other.draft(title="Elsewhere")
        self.delivery = self.subscription.deliveries.first()
        # A member's account on the code host, linked (a manager may unlink it).
        self.host_account = HostAccount.objects.create(
            project=flow.project, host_id=583231, login="fm-agent", user=flow.agent
        )
        self.import_run = interop_services.import_check(  # a dry run, to apply
            project=flow.project,
            actor=flow.manager,
            format="beads",
            name="i.jsonl",
            data=BEADS_LINE,
        )

    def client(self, api, role: str):
        client = api(getattr(self.flow, role))
        client.raise_request_exception = False  # a crash is a 500 to assert on, not an exception
        return client


# --- JSON endpoints -------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: object  # World -> str
    caller: str  # the Flow member allowed to call it
    valid: dict  # a body the endpoint accepts


ENDPOINTS = {
    "claim": Endpoint("POST", lambda w: "/api/v1/tasks/claim/", "agent", {"project": "FM"}),
    "heartbeat": Endpoint(
        "POST",
        lambda w: f"/api/v1/attempts/{w.attempt.pk}/heartbeat/",
        "agent",
        {"lease_seconds": 60},
    ),
    "checkpoint": Endpoint(
        "PUT",
        lambda w: f"/api/v1/attempts/{w.attempt.pk}/checkpoint/",
        "agent",
        {"data": {"step": 1}, "revision": 0},
    ),
    "submit": Endpoint(
        "POST",
        lambda w: f"/api/v1/attempts/{w.attempt.pk}/submit/",
        "agent",
        {"summary": "done", "change": {"commit": "abc1234000000000000000000000000000000000"}},
    ),
    "release": Endpoint(
        "POST", lambda w: f"/api/v1/attempts/{w.attempt.pk}/release/", "agent", {"reason": "r"}
    ),
    "usage.void": Endpoint(
        "POST",
        lambda w: f"/api/v1/attempts/{w.attempt.pk}/usage/void/",
        "manager",
        {"reason": "r"},
    ),
    "review": Endpoint(
        "POST",
        lambda w: f"/api/v1/tasks/{w.review_task.key}/review/",
        "reviewer",
        {"verdict": "reject", "reason": "not yet"},
    ),
    "task.create": Endpoint(
        "POST", lambda w: "/api/v1/tasks/", "manager", {"project": "FM", "title": "t"}
    ),
    "task.patch": Endpoint(
        "PATCH", lambda w: f"/api/v1/tasks/{w.draft.key}/", "manager", {"title": "t2"}
    ),
    "task.publish": Endpoint(
        "POST", lambda w: f"/api/v1/tasks/{w.draft.key}/publish/", "manager", {"reason": "r"}
    ),
    "spec.create": Endpoint(
        "POST",
        lambda w: "/api/v1/specs/",
        "manager",
        {"project": "FM", "title": "t", "body": "b", "criteria": CRITERIA},
    ),
    "version.create": Endpoint(
        "POST",
        lambda w: f"/api/v1/specs/{w.spec.key}/versions/",
        "manager",
        {"body": "b", "criteria": CRITERIA},
    ),
    "version.accept": Endpoint(
        "POST",
        lambda w: f"/api/v1/specs/{w.spec.key}/versions/2/accept/",
        "manager",
        {"reason": "r"},
    ),
    "decision.create": Endpoint(
        "POST",
        lambda w: "/api/v1/decisions/",
        "manager",
        {"project": "FM", "title": "t", "context": "c", "decision": "d"},
    ),
    "decision.reject": Endpoint(
        "POST", lambda w: f"/api/v1/decisions/{w.decision.key}/reject/", "manager", {"reason": "r"}
    ),
    "attempt.decision": Endpoint(
        "POST",
        lambda w: f"/api/v1/attempts/{w.attempt.pk}/decisions/",
        "agent",
        {"title": "t", "context": "c", "decision": "d"},
    ),
    "project.patch": Endpoint(
        "PATCH", lambda w: "/api/v1/projects/FM/", "manager", {"max_attempts": 5}
    ),
}


def send_json(world, api, name: str, body, content_type: str = JSON, **extra):
    endpoint = ENDPOINTS[name]
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    client = world.client(api, endpoint.caller)
    return client.generic(
        endpoint.method, endpoint.path(world), data=raw, content_type=content_type, **extra
    )


def valid(name: str, **changes) -> dict:
    return {**ENDPOINTS[name].valid, **changes}


# --- The API's operations --------------------------------------------------------------------


def schema_operations() -> list[tuple[str, str]]:
    """Every ``(METHOD, path template)`` of the API, from the OpenAPI schema."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return [
        (method.upper(), path)
        for path, item in schema["paths"].items()
        for method in item
        if path.startswith("/api/v1/")
    ]


# --- Uploads ----------------------------------------------------------------------------------


def multipart(fields=(), files=(), *, close: bool = True) -> bytes:
    """A multipart/form-data body built by hand, so names and bytes arrive exactly as written.

    ``files`` are ``(field, filename, content, content_type)``; a filename is sent raw (bytes
    as given, str as UTF-8), unlike the test client's encoder, which strips paths.
    """
    out = b""
    for name, value in fields:
        value = value if isinstance(value, bytes) else value.encode()
        out += (
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
            + value
            + b"\r\n"
        )
    for name, filename, content, content_type in files:
        filename = filename if isinstance(filename, bytes) else filename.encode()
        out += (
            f"--{BOUNDARY}\r\n".encode()
            + f'Content-Disposition: form-data; name="{name}"; filename="'.encode()
            + filename
            + f'"\r\nContent-Type: {content_type}\r\n\r\n'.encode()
            + content
            + b"\r\n"
        )
    if close:
        out += f"--{BOUNDARY}--\r\n".encode()
    return out


def upload_body(kind="log", content=b"one line\n", name="run.log", media="text/plain", **fields):
    return multipart([("kind", kind), *fields.items()], [("file", name, content, media)])


def post_upload(client, attempt, body: bytes, content_type: str = MULTIPART, **extra):
    """POST a raw body to an attempt's evidence (``attempt`` is a row or its id)."""
    return client.generic(
        "POST",
        f"/api/v1/attempts/{getattr(attempt, 'pk', attempt)}/evidence/",
        data=body,
        content_type=content_type,
        **extra,
    )
