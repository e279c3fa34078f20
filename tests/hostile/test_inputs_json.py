"""Hostile JSON fed to every JSON endpoint: bodies no endpoint accepts, and hostile values
in each field (tests/hostile/world.py holds the endpoints and what "changes nothing" means).

DESIGN.md promises: "Bad input is answered with a 4xx and a reason, and changes nothing".
A refused case asserts the exact status and ``code``, a JSON body with ``detail``, that no
temporary upload file is left, that no file appeared under MEDIA_ROOT, and that no row of
the tasks, decisions and evidence apps changed (counts first, then every row).
"""

import json
from dataclasses import dataclass, field

import pytest

from tests.factories import CRITERIA
from tests.hostile.world import ENDPOINTS, JSON, NUL, Snapshot, assert_refused, send_json, valid


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
