"""What the mass-assignment modules of this folder share: what "nothing stored changed"
means for every app, the one refusal they expect, and each operation of the API called with
a body it accepts, by the caller a live token would let through.
"""

import json
from dataclasses import dataclass

from django.apps import apps

from tests.factories import CRITERIA
from tests.hostile.world import (
    BEADS_LINE,
    MULTIPART,
    assert_refused,
    files_in,
    multipart,
    post_upload,
    schema_operations,
    upload_body,
)

PAST = "2000-01-01T00:00:00Z"
FUTURE = "2999-01-01T00:00:00Z"
READ_ONLY = "read-only field"
UNKNOWN = "unknown field"


def call(world, api, role, method, path, body):
    client = world.client(api, role)
    return getattr(client, method)(path, body, format="json")


def attempt_call(world, api, role, method, action, body):
    return call(world, api, role, method, f"/api/v1/attempts/{world.attempt.pk}/{action}/", body)


STORED_APPS = ("projects", "tasks", "landing", "decisions", "evidence", "events", "interop")


@dataclass
class Stored:
    """Every row of every app (projects, memberships and webhooks too) and every stored file."""

    rows: dict
    media: set

    @classmethod
    def take(cls, settings) -> "Stored":
        rows = {
            model._meta.label: list(model._base_manager.order_by("pk").values())
            for label in STORED_APPS
            for model in apps.get_app_config(label).get_models(include_auto_created=True)
        }
        return cls(rows, files_in(settings.MEDIA_ROOT))

    def assert_unchanged(self, settings) -> None:
        now = Stored.take(settings)
        assert files_in(settings.FACTORY_UPLOAD_TEMP_DIR) == set(), "a temporary file lingers"
        assert now.media == self.media, "a file was stored"
        for label, rows in self.rows.items():
            assert now.rows[label] == rows, f"{label} changed"


def refused(response, before, settings, name: str, why: str) -> None:
    """A 400 ``invalid`` naming exactly ``name`` with ``why``, and nothing stored changed."""
    body = assert_refused(response, 400, "invalid")
    assert body["fields"] == {name: [why]}, body
    before.assert_unchanged(settings)


def why(name: str, shown: set) -> str:
    return READ_ONLY if name in shown else UNKNOWN


# --- Every operation of the schema, called ------------------------------------------------------


OPERATIONS = schema_operations()

# A body each write would accept from the right caller, so a 401 is the token's doing alone.
BODIES = {
    ("POST", "/api/v1/tasks/claim/"): {"project": "FM"},
    ("POST", "/api/v1/tasks/"): {"project": "FM", "title": "t"},
    ("PATCH", "/api/v1/tasks/{key}/"): {"title": "t"},
    ("POST", "/api/v1/tasks/{key}/review/"): {"verdict": "approve"},
    ("PATCH", "/api/v1/projects/{slug}/"): {"name": "n"},
    ("PUT", "/api/v1/attempts/{attempt_id}/checkpoint/"): {"data": {"a": 1}, "revision": 0},
    ("POST", "/api/v1/attempts/{attempt_id}/submit/"): {"summary": "s"},
    ("POST", "/api/v1/attempts/{attempt_id}/decisions/"): {
        "title": "t",
        "context": "c",
        "decision": "d",
    },
    ("POST", "/api/v1/specs/"): {"project": "FM", "title": "t", "body": "b", "criteria": CRITERIA},
    ("POST", "/api/v1/specs/{key}/versions/"): {"body": "b", "criteria": CRITERIA},
    ("POST", "/api/v1/decisions/"): {
        "project": "FM",
        "title": "t",
        "context": "c",
        "decision": "d",
    },
    ("POST", "/api/v1/decisions/{key}/reject/"): {"reason": "r"},
    ("POST", "/api/v1/projects/{slug}/webhooks/"): {"url": "http://127.0.0.1:9/hook"},
    ("PATCH", "/api/v1/projects/{slug}/webhooks/{id}/"): {"description": "d"},
    ("POST", "/api/v1/attempts/{attempt_id}/comments/"): {"path": "x.py", "line": 1, "body": "b"},
    ("POST", "/api/v1/projects/{slug}/landing/{key}/dequeue/"): {"to": "ready", "reason": "r"},
    ("POST", "/api/v1/projects/{slug}/landing/{key}/fast/"): {"reason": "the outage fix"},
    ("POST", "/api/v1/projects/{slug}/landing/pause/"): {"reason": "a release freeze"},
    ("POST", "/api/v1/projects/{slug}/landing/flaky/"): {
        "test": "tests/test_calc.py::CalcTest::test_add",
        "quarantined": True,
        "reason": "flaky",
    },
    ("POST", "/api/v1/attempts/{attempt_id}/usage/void/"): {"reason": "r"},
    ("POST", "/api/v1/tasks/{key}/revert/"): {"reason": "r"},
    ("POST", "/api/v1/tasks/{key}/revert/cancel/"): {"reason": "r"},
    ("POST", "/api/v1/projects/{slug}/code-host/accounts/"): {"login": "fm-x", "user": "fm-agent"},
}


def fill(world, method: str, template: str) -> str:
    """The operation's path with real keys and ids of the world, each in a state it accepts."""
    task = world.task
    if template.endswith(("/review/",)):
        task = world.review_task
    elif template.endswith("/publish/") or method == "PATCH":
        task = world.draft
    elif template.endswith(("/cancel/",)):
        task = world.ready
    key = {
        "/api/v1/tasks/": task.key,
        "/api/v1/specs/": world.spec.key,
        "/api/v1/decisions/": world.decision.key,
    }
    prefix = next((p for p in key if template.startswith(p + "{")), None)
    path = template.replace("{key}", key[prefix]) if prefix else template
    path = path.replace("{key}", world.queued.key)  # the landing queue's task
    number = "2" if template.endswith("/accept/") and "/specs/" in template else "1"
    attempt = world.commented if "/comments/" in template else world.attempt
    return (
        path.replace("{attempt_id}", str(attempt.pk))
        .replace("{comment_id}", str(world.comment.pk))
        .replace("{evidence_id}", str(world.evidence.pk))
        .replace("{slug}", "FM")
        .replace("{number}", number)
        .replace("{id}", str(world.subscription.pk))
        .replace("{delivery}", str(world.delivery.pk))
        .replace("{run_id}", str(world.import_run.pk))
        .replace("{export_format}", "madr")
        .replace("{host_id}", str(world.host_account.host_id))
    )


def caller_for(world, method: str, template: str):
    """Who would be allowed to make the call with a live token."""
    if "/comments/" in template and method == "POST":
        return world.flow.reviewer
    if template.endswith("/usage/void/"):
        return world.flow.manager
    if template == "/api/v1/tasks/claim/" or (
        "{attempt_id}" in template and method != "GET" and not template.endswith("/evidence/")
    ):
        return world.flow.agent
    if template.endswith("/review/"):
        return world.flow.reviewer
    return world.flow.manager


def request(world, client, method: str, template: str, extra: dict | None = None):
    """The operation called with a body it accepts, plus the fields of ``extra``."""
    extra = extra or {}
    path = fill(world, method, template)
    if method == "POST" and template.endswith("/evidence/"):
        return post_upload(client, world.attempt, upload_body(**extra))
    if method == "POST" and template.endswith("/imports/"):
        return client.generic(
            "POST",
            path,
            data=multipart(
                [("format", "beads"), *extra.items()],
                [("file", "i.jsonl", BEADS_LINE, "text/plain")],
            ),
            content_type=MULTIPART,
        )
    body = {**BODIES.get((method, template), {}), **extra}
    if method == "GET":
        return client.get(path)
    return client.generic(
        method, path, data=json.dumps(body).encode(), content_type="application/json"
    )
