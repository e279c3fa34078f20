"""Walks tests/authz_matrix.tsv: every endpoint by every kind of caller → the exact status.

A refused call must also change nothing: the count of events stays the same. A refused
write is refused before its body is read (authorize, then validate): the same status and
code whatever body it sends, empty, unparsable or of the wrong shape, and no row changes.
"""

import copy
import csv
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import resolve
from django.utils import timezone
from knox.models import AuthToken
from rest_framework.test import APIClient

from codehosts.models import HostAccount
from decisions import services as decisions
from decisions.models import Decision, Spec, SpecVersion
from events import services as events
from events.models import Subscription
from evidence.models import Evidence
from interop import services as interop
from interop.models import ImportRun
from landing import backoff
from landing import services as landing_services
from projects.models import Event, Project
from projects.roles import Role
from projects.services import membership_grant
from tasks import attempts, comments, review
from tasks.landing import task_land
from tasks.models import Attempt, LineComment, Task
from tests.conftest import world_for_the_module
from tests.factories import CRITERIA, Flow, ProjectFactory, all_met, member
from tests.hostile.world import BEADS_LINE

# Who may call what is decided alike on both engines (before the body is read: ADR 0025), and
# a refusal rolls back whole on either; each route's own queries run on PostgreSQL in its
# module's tests and the route walks (ADR 0015, "engine_neutral").
pytestmark = pytest.mark.engine_neutral

MATRIX = Path(__file__).with_name("authz_matrix.tsv")
JUNIT = b"<testsuite tests='1'><testcase classname='t' name='a'/></testsuite>"


def read_matrix():
    """``(endpoint, caller, status, code)`` for every cell; ``code`` is "" unless the cell names it."""
    lines = [line for line in MATRIX.read_text().splitlines() if line and not line.startswith("#")]
    rows = list(csv.DictReader(lines, delimiter="\t"))
    return [
        (row["endpoint"], caller, int(cell.partition("/")[0]), cell.partition("/")[2])
        for row in rows
        for caller, cell in row.items()
        if caller != "endpoint"
    ]


def decision(flow, proposer=None):
    """A proposed decision; by default its proposer is a reviewer none of the callers is."""
    return decisions.decision_propose(
        project=flow.project,
        actor=proposer or flow.proposer,
        title="t",
        context="c",
        decision="d",
    )


def decision_from_the_holders_attempt(flow):
    """The holder, who is also a reviewer, proposes a decision through the attempt it holds."""
    membership_grant(user=flow.agent, project=flow.project, role=Role.REVIEWER)
    return decisions.decision_propose(
        project=flow.project,
        actor=flow.agent,
        attempt=flow.held[1],
        title="t",
        context="c",
        decision="d",
    )


# Each builder makes the object the endpoint needs, in a state that allows the call,
# and returns (method, path, body, format).
ENDPOINTS = {
    "projects.list": lambda f: ("get", "/api/v1/projects/", None, None),
    "projects.detail": lambda f: ("get", "/api/v1/projects/FM/", None, None),
    "projects.edit": lambda f: ("patch", "/api/v1/projects/FM/", {"max_attempts": 5}, "json"),
    "tasks.list": lambda f: ("get", "/api/v1/tasks/", None, None),
    "tasks.create": lambda f: ("post", "/api/v1/tasks/", {"project": "FM", "title": "t"}, "json"),
    "tasks.detail": lambda f: ("get", f"/api/v1/tasks/{f.draft().key}/", None, None),
    "tasks.edit": lambda f: ("patch", f"/api/v1/tasks/{f.draft().key}/", {"title": "new"}, "json"),
    "tasks.claim": lambda f: (
        f.ready(),
        ("post", "/api/v1/tasks/claim/", {"project": "FM"}, "json"),
    )[1],
    "tasks.context": lambda f: ("get", f"/api/v1/tasks/{f.held[0].key}/context/", None, None),
    "tasks.handoff": lambda f: ("get", f"/api/v1/tasks/{f.held[0].key}/handoff/", None, None),
    "tasks.events": lambda f: ("get", f"/api/v1/tasks/{f.held[0].key}/events/", None, None),
    "tasks.review": lambda f: (
        "post",
        f"/api/v1/tasks/{f.reviewable().key}/review/",
        {"verdict": "approve"},
        "json",
    ),
    "tasks.publish": lambda f: ("post", f"/api/v1/tasks/{f.draft().key}/publish/", {}, "json"),
    "tasks.unblock": lambda f: ("post", f"/api/v1/tasks/{f.blocked()[0].key}/unblock/", {}, "json"),
    "tasks.reopen": lambda f: ("post", f"/api/v1/tasks/{f.failed()[0].key}/reopen/", {}, "json"),
    "tasks.cancel": lambda f: ("post", f"/api/v1/tasks/{f.ready().key}/cancel/", {}, "json"),
    "attempts.detail": lambda f: ("get", f"/api/v1/attempts/{f.held[1].pk}/", None, None),
    "attempts.heartbeat": lambda f: (
        "post",
        f"/api/v1/attempts/{f.held[1].pk}/heartbeat/",
        {},
        "json",
    ),
    "attempts.checkpoint.read": lambda f: (
        "get",
        f"/api/v1/attempts/{f.held[1].pk}/checkpoint/",
        None,
        None,
    ),
    "attempts.checkpoint.save": lambda f: (
        "put",
        f"/api/v1/attempts/{f.held[1].pk}/checkpoint/",
        {"data": {"a": 1}, "revision": 0},
        "json",
    ),
    "attempts.evidence.list": lambda f: (
        "get",
        f"/api/v1/attempts/{f.held[1].pk}/evidence/",
        None,
        None,
    ),
    "attempts.evidence.upload": lambda f: (
        "post",
        f"/api/v1/attempts/{f.held[1].pk}/evidence/",
        {"file": SimpleUploadedFile("j.xml", JUNIT), "kind": "junit"},
        "multipart",
    ),
    "attempts.decisions": lambda f: (
        "post",
        f"/api/v1/attempts/{f.held[1].pk}/decisions/",
        {"title": "t", "context": "c", "decision": "d"},
        "json",
    ),
    "attempts.submit": lambda f: (
        "post",
        f"/api/v1/attempts/{f.held[1].pk}/submit/",
        {"summary": "s"},
        "json",
    ),
    "attempts.release": lambda f: ("post", f"/api/v1/attempts/{f.held[1].pk}/release/", {}, "json"),
    "attempts.usage.void": lambda f: (
        "post",
        f"/api/v1/attempts/{f.reported().pk}/usage/void/",
        {"reason": "the meter was wrong"},
        "json",
    ),
    "evidence.detail": lambda f: ("get", f"/api/v1/evidence/{f.evidence().pk}/", None, None),
    "evidence.content": lambda f: (
        "get",
        f"/api/v1/evidence/{f.evidence().pk}/content/",
        None,
        None,
    ),
    "specs.list": lambda f: ("get", "/api/v1/specs/", None, None),
    "specs.create": lambda f: (
        "post",
        "/api/v1/specs/",
        {"project": "FM", "title": "t", "body": "b", "criteria": CRITERIA},
        "json",
    ),
    "specs.detail": lambda f: ("get", f"/api/v1/specs/{f.spec().key}/", None, None),
    "specs.versions.create": lambda f: (
        "post",
        f"/api/v1/specs/{f.spec().key}/versions/",
        {"body": "v2", "criteria": CRITERIA},
        "json",
    ),
    "specs.version.detail": lambda f: (
        "get",
        f"/api/v1/specs/{f.spec().key}/versions/1/",
        None,
        None,
    ),
    "specs.version.accept": lambda f: (
        "post",
        f"/api/v1/specs/{f.draft_version().spec.key}/versions/2/accept/",
        {},
        "json",
    ),
    "decisions.list": lambda f: ("get", "/api/v1/decisions/", None, None),
    "decisions.create": lambda f: (
        "post",
        "/api/v1/decisions/",
        {"project": "FM", "title": "t", "context": "c", "decision": "d"},
        "json",
    ),
    "decisions.detail": lambda f: ("get", f"/api/v1/decisions/{decision(f).key}/", None, None),
    "decisions.impact": lambda f: (
        "get",
        f"/api/v1/decisions/{decision(f).key}/impact/",
        None,
        None,
    ),
    "decisions.accept": lambda f: (
        "post",
        f"/api/v1/decisions/{decision(f).key}/accept/",
        {},
        "json",
    ),
    "decisions.reject": lambda f: (
        "post",
        f"/api/v1/decisions/{decision(f).key}/reject/",
        {"reason": "no"},
        "json",
    ),
    "decisions.accept@proposer": lambda f: (
        "post",
        f"/api/v1/decisions/{decision(f, proposer=f.reviewer).key}/accept/",
        {},
        "json",
    ),
    "decisions.reject@proposer": lambda f: (
        "post",
        f"/api/v1/decisions/{decision(f, proposer=f.reviewer).key}/reject/",
        {"reason": "no"},
        "json",
    ),
    "decisions.accept@attempt_agent": lambda f: (
        "post",
        f"/api/v1/decisions/{decision_from_the_holders_attempt(f).key}/accept/",
        {},
        "json",
    ),
    "decisions.reject@attempt_agent": lambda f: (
        "post",
        f"/api/v1/decisions/{decision_from_the_holders_attempt(f).key}/reject/",
        {"reason": "no"},
        "json",
    ),
    "attempts.comments.list": lambda f: (
        "get",
        f"/api/v1/attempts/{f.commentable()[0].pk}/comments/",
        None,
        None,
    ),
    "attempts.comments.create": lambda f: (
        "post",
        f"/api/v1/attempts/{f.commentable()[0].pk}/comments/",
        {"path": "x.py", "line": 1, "body": "this line"},
        "json",
    ),
    "attempts.comments.resolve": lambda f: (
        "post",
        "/api/v1/attempts/{}/comments/{}/resolve/".format(
            *(lambda a, c: (a.pk, c.pk))(*f.commentable())
        ),
        {},
        "json",
    ),
    "webhooks.list": lambda f: ("get", "/api/v1/projects/FM/webhooks/", None, None),
    "webhooks.create": lambda f: (
        "post",
        "/api/v1/projects/FM/webhooks/",
        {"url": "http://127.0.0.1:9/hook"},
        "json",
    ),
    "webhooks.detail": lambda f: (
        "get",
        f"/api/v1/projects/FM/webhooks/{f.subscription().pk}/",
        None,
        None,
    ),
    "webhooks.edit": lambda f: (
        "patch",
        f"/api/v1/projects/FM/webhooks/{f.subscription().pk}/",
        {"active": False},
        "json",
    ),
    "webhooks.delete": lambda f: (
        "delete",
        f"/api/v1/projects/FM/webhooks/{f.subscription().pk}/",
        None,
        None,
    ),
    "webhooks.deliveries": lambda f: (
        "get",
        f"/api/v1/projects/FM/webhooks/{f.subscription().pk}/deliveries/",
        None,
        None,
    ),
    "imports.create": lambda f: (
        "post",
        "/api/v1/projects/FM/imports/",
        {"file": SimpleUploadedFile("i.jsonl", BEADS_LINE), "format": "beads"},
        "multipart",
    ),
    "imports.detail": lambda f: (
        "get",
        f"/api/v1/projects/FM/imports/{f.import_run().pk}/",
        None,
        None,
    ),
    "imports.apply": lambda f: (
        "post",
        f"/api/v1/projects/FM/imports/{f.import_run().pk}/apply/",
        {},
        "json",
    ),
    "exports.madr": lambda f: ("get", "/api/v1/projects/FM/exports/madr/", None, None),
    "landing.queue": lambda f: ("get", "/api/v1/projects/FM/landing/", None, None),
    "plan.read": lambda f: ("get", "/api/v1/projects/FM/plan/", None, None),
    "projects.costs": lambda f: ("get", "/api/v1/projects/FM/costs/", None, None),
    "landing.retry": lambda f: (
        f.backing_off(),
        ("post", "/api/v1/projects/FM/landing/retry/", {"reason": "main is fixed"}, "json"),
    )[1],
    "landing.pause": lambda f: (
        "post",
        "/api/v1/projects/FM/landing/pause/",
        {"reason": "release freeze"},
        "json",
    ),
    "landing.resume": lambda f: (
        f.paused(),
        ("post", "/api/v1/projects/FM/landing/resume/", {"reason": "released"}, "json"),
    )[1],
    "landing.flaky": lambda f: ("get", "/api/v1/projects/FM/landing/flaky/", None, None),
    "landing.quarantine": lambda f: (
        "post",
        "/api/v1/projects/FM/landing/flaky/",
        {"test": "tests/test_calc.py::CalcTest::test_add", "quarantined": True, "reason": "x"},
        "json",
    ),
    "landing.fast": lambda f: (
        "post",
        f"/api/v1/projects/FM/landing/{f.queued().key}/fast/",
        {"reason": "the outage fix"},
        "json",
    ),
    "landing.dequeue": lambda f: (
        "post",
        f"/api/v1/projects/FM/landing/{f.queued().key}/dequeue/",
        {"to": "ready", "reason": "not now"},
        "json",
    ),
    "tasks.revert": lambda f: (
        "post",
        f"/api/v1/tasks/{f.landed().key}/revert/",
        {"reason": "it broke the export"},
        "json",
    ),
    "tasks.revert_cancel": lambda f: (
        "post",
        f"/api/v1/tasks/{f.revert_queued().key}/revert/cancel/",
        {"reason": "a false alarm"},
        "json",
    ),
    "codehosts.accounts": lambda f: ("get", "/api/v1/projects/FM/code-host/accounts/", None, None),
    "codehosts.accounts.link": lambda f: (
        "post",
        "/api/v1/projects/FM/code-host/accounts/",
        {"login": "fm-agent", "user": "fm-agent"},
        "json",
    ),
    "codehosts.accounts.unlink": lambda f: (
        "delete",
        f"/api/v1/projects/FM/code-host/accounts/{f.host_account().host_id}/",
        None,
        None,
    ),
    "webhooks.redeliver": lambda f: (
        "post",
        "/api/v1/projects/FM/webhooks/{}/deliveries/{}/redeliver/".format(*f.delivery()),
        {},
        "json",
    ),
}


DIFF = b"--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"


class World(Flow):
    """The project FM with a task held by ``holder`` and builders for everything else."""

    @property
    def proposer(self):
        return member(self.project, Role.REVIEWER, "fm-proposer")

    @property
    def held(self):
        if not hasattr(self, "_held"):
            self._held = self.claimed(agent=self.agent)
        return self._held

    def reported(self):
        """The held attempt, with usage its agent reported (a manager may void it)."""
        attempt = self.held[1]
        attempts.attempt_heartbeat(attempt=attempt, actor=self.agent, usage={"cost_usd": "2.5"})
        return attempt

    def reviewable(self):
        return self.in_review(agent=self.agent)[0]

    def host_account(self):
        """The agent's account on the code host, linked (a manager may unlink it)."""
        return HostAccount.objects.create(
            project=self.project, host_id=583231, login="fm-agent", user=self.agent
        )

    def commentable(self):
        """An attempt of the holder's in review, with a diff; and a comment on it."""
        _, attempt = self.claimed(agent=self.agent, title="commented")
        self.attach(attempt, DIFF, kind="diff", name="change.diff")
        attempts.attempt_submit(attempt=attempt, actor=self.agent, summary="s", change={})
        attempt.refresh_from_db()
        if attempt.state == "checking":
            attempts.attempt_gates_passed(attempt=attempt)
        reviewer = member(self.project, Role.REVIEWER, "fm-commenter")
        comment = comments.comment_add(
            attempt=attempt, actor=reviewer, path="x.py", line=1, body="why?"
        )
        return attempt, comment

    def evidence(self):
        return self.attach(self.held[1])

    def subscription(self):
        return events.subscription_create(
            project=self.project, actor=self.manager, url="http://127.0.0.1:9/hook"
        )

    def delivery(self):
        subscription = self.subscription()
        self.ready()
        return subscription.pk, subscription.deliveries.get().pk

    def import_run(self):
        return interop.import_check(
            project=self.project,
            actor=self.manager,
            format="beads",
            name="i.jsonl",
            data=BEADS_LINE,
        )

    def queued(self):
        """A task approved with landing on: queued to land (no lander runs here)."""
        self.project.landing = {**self.project.landing, "mode": "push"}
        self.project.save(update_fields=["landing"])
        task, attempt = self.in_review(agent=self.agent, title="queued")
        review.task_approve(task=task, actor=self.reviewer, criteria=all_met(attempt))
        return task

    def landed(self):
        """A task whose queued change landed (no lander runs here)."""
        task = self.queued()
        task_land(attempt=task.current_attempt, commit="b" * 40, batch=None, seconds=1.0)
        return task

    def revert_queued(self):
        """A landed task whose revert a manager asked for (no lander runs here)."""
        task = self.landed()
        landing_services.revert_request(task=task, actor=self.manager, reason="wrong fix")
        return task

    def backing_off(self):
        """The project's lander backs off after a batch erred (no lander runs here)."""
        attempt = self.queued().current_attempt
        backoff.record(
            self.project, head=attempt, tip="a" * 40, reason="nothing landed: red", verified=True
        )

    def paused(self):
        """The project's landing is paused by its manager."""
        landing_services.landing_pause(project=self.project, actor=self.manager, reason="freeze")

    def draft_version(self):
        spec = self.spec()
        return decisions.spec_version_create(
            spec=spec, actor=self.manager, body="v2", criteria=CRITERIA
        )


def client_for(world, outsider, caller):
    client = APIClient()
    user = {
        "holder": world.agent,
        "agent": world.agent2,
        "outsider": outsider.agent,
        "verifier": world.verifier,
        "reviewer": world.reviewer,
        "manager": world.manager,
        "expired": world.agent,
        "anonymous": None,
    }[caller]
    if user is not None:
        row, token = AuthToken.objects.create(user=user)
        if caller == "expired":
            AuthToken.objects.filter(pk=row.pk).update(
                expiry=timezone.now() - timezone.timedelta(seconds=1)
            )
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def test_the_matrix_covers_every_operation_of_the_api():
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    operations = [
        (path, method)
        for path, item in schema["paths"].items()
        for method in item
        if path.startswith("/api/v1/")
    ]

    assert {endpoint for endpoint, *_ in read_matrix()} == set(ENDPOINTS)
    assert len(operations) == len({endpoint.partition("@")[0] for endpoint in ENDPOINTS})


def build_worlds():
    """The project FM's world and the outsider's project OT, with their members."""
    return World(ProjectFactory(slug="FM"), prefix="fm"), Flow(
        ProjectFactory(slug="OT"), prefix="ot"
    )


@pytest.fixture(scope="module")
def _worlds(django_db_setup, django_db_blocker):
    # The worlds hold no evidence files: each test keeps its own media folder.
    with world_for_the_module(django_db_blocker, build_worlds) as worlds:
        yield worlds


@pytest.fixture
def worlds(db, _worlds):
    """The worlds, built once for the module; each test is rolled back to them.

    Each test gets its own copy of their objects: ``World`` keeps the attempt it holds, and
    a test's instances must not point the next test at rows that were rolled back.
    """
    return copy.deepcopy(_worlds)


@pytest.mark.parametrize(("endpoint", "caller", "expected", "code"), read_matrix())
def test_each_caller_gets_the_status_in_the_matrix(worlds, endpoint, caller, expected, code):
    world, outsider = worlds
    method, path, body, fmt = ENDPOINTS[endpoint](world)
    events_before = Event.objects.count()

    response = getattr(client_for(world, outsider, caller), method)(path, body, format=fmt)

    assert response.status_code == expected, response.content[:300]
    if expected >= 400:
        assert Event.objects.count() == events_before
        assert response.json()["code"] == code if code else response.json()["code"]


# Bodies a caller without the right may send instead of the right one: none at all, bytes
# that are no JSON, a form, JSON of the wrong shape, and an object whose every field is wrong.
GARBAGE = {
    "json": [
        (None, None),
        (b"\x00{not json", "application/json"),
        (b"title=t&project=FM", "application/x-www-form-urlencoded"),
        (b'[{"project": "FM"}]', "application/json"),
        (b'{"project": 7, "title": "\\u0000", "line": 0, "unknown": true}', "application/json"),
    ],
    "multipart": [
        (None, None),
        ({}, "multipart"),
        ({"file": b"", "kind": "nope", "format": "nope", "unknown": "x"}, "multipart"),
    ],
}
WATCHED = [Project, Task, Attempt, Evidence, Spec, SpecVersion, Decision, LineComment]
WATCHED += [Subscription, ImportRun, HostAccount, Event]


def rows() -> dict:
    """Every row of the models a write could touch, as it is now."""
    return {model.__name__: list(model.objects.order_by("pk").values()) for model in WATCHED}


def send(client, method, path, body, kind):
    if kind == "multipart":
        files = {
            name: SimpleUploadedFile("empty.xml", value) if isinstance(value, bytes) else value
            for name, value in body.items()
        }
        return getattr(client, method)(path, files, format="multipart")
    if body is None:
        return client.generic(method.upper(), path)
    return client.generic(method.upper(), path, body, content_type=kind)


def refused_cells():
    return [cell for cell in read_matrix() if cell[2] in (401, 403, 404)]


@pytest.mark.parametrize(("endpoint", "caller", "expected", "code"), refused_cells())
def test_a_refused_write_is_refused_whatever_its_body(worlds, endpoint, caller, expected, code):
    world, outsider = worlds
    method, path, _, fmt = ENDPOINTS[endpoint](world)
    if method == "get":
        return
    writers = getattr(resolve(path).func.view_class, "writers", None)
    if expected == 404 and getattr(writers, "project_field", None):
        return  # the project is found from the body: which one it names decides
    client = client_for(world, outsider, caller)
    before = rows()

    answers = [
        (response.status_code, response.json()["code"])
        for body, kind in GARBAGE["multipart" if fmt == "multipart" else "json"]
        for response in [send(client, method, path, body, kind)]
    ]

    assert {status for status, _ in answers} == {expected}, answers
    assert len(set(answers)) == 1, answers
    assert answers[0][1] == code if code else answers[0][1]
    assert rows() == before
