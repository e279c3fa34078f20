"""Factories for rows, and ``Flow`` for tasks in a given state.

Rows without a state machine come from factory_boy factories. A task or attempt in a
particular state is reached the way production reaches it: through the services,
so the events, counters and pointers are the real ones.
"""

from datetime import timedelta

import factory
from django.contrib.auth import get_user_model
from django.core.files.base import ContentFile
from django.utils import timezone

from decisions import services as decision_services
from evidence import services as evidence_services
from projects.models import Membership, Project
from projects.roles import Role
from tasks import attempts, review, services
from tasks.models import Attempt

CRITERIA = [
    {
        "key": "AC-1",
        "text": "Claims are exclusive.",
        "proof": {"check": "tests", "select": "tests/test_claim.py::*"},
    },
    {
        "key": "AC-2",
        "text": "The queue is shown.",
        "proof": {"check": "evidence", "kind": "screenshot"},
    },
    {"key": "AC-3", "text": "Readable code.", "proof": {"check": "review"}},
]


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ["username"]

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.invalid")
    password = factory.django.Password("pw")


class ProjectFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Project
        django_get_or_create = ["slug"]

    slug = factory.Sequence(lambda n: f"P{n}")
    name = factory.LazyAttribute(lambda p: f"Project {p.slug}")
    max_attempts = 3


def member(project, role, username=None):
    """A user holding ``role`` in ``project``."""
    user = UserFactory(username=username) if username else UserFactory()
    Membership.objects.get_or_create(user=user, project=project, role=role)
    return user


def all_met(attempt) -> list[dict]:
    """A reviewer's marks of every criterion of the attempt's pinned version as met."""
    if attempt.spec_version_id is None:
        return []
    return [
        {"key": c.key, "verdict": "met", "note": "checked by the reviewer"}
        for c in attempt.spec_version.criteria.all()
    ]


def expire_lease(attempt, seconds_ago=1):
    """Let an attempt's lease run out, as if the agent had stopped heartbeating."""
    Attempt.objects.filter(pk=attempt.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=seconds_ago)
    )


class Flow:
    """Drives tasks of one project through the real services to any state."""

    def __init__(self, project=None, prefix=""):
        self.project = project or ProjectFactory()
        p = prefix or self.project.slug.lower()
        self.manager = member(self.project, Role.MANAGER, f"{p}-manager")
        self.agent = member(self.project, Role.AGENT, f"{p}-agent")
        self.agent2 = member(self.project, Role.AGENT, f"{p}-agent2")
        self.reviewer = member(self.project, Role.REVIEWER, f"{p}-reviewer")
        self.verifier = member(self.project, Role.VERIFIER, f"{p}-verifier")

    def gates(self, policy: dict) -> None:
        """Set the project's gate policy ({} for none: submissions go straight to review)."""
        self.project.gate_policy = policy
        self.project.save(update_fields=["gate_policy"])

    def spec(self, criteria=CRITERIA, body="# Spec\n"):
        spec = decision_services.spec_create(
            project=self.project, actor=self.manager, title="Claiming", body=body, criteria=criteria
        )
        decision_services.spec_version_accept(version=spec.versions.get(), actor=self.manager)
        return spec

    def draft(self, **kwargs):
        kwargs.setdefault("title", "A task")
        return services.task_create(project=self.project, actor=self.manager, **kwargs)

    def ready(self, **kwargs):
        return services.task_publish(task=self.draft(**kwargs), actor=self.manager)

    def claimed(self, agent=None, lease_seconds=300, **kwargs):
        task = self.ready(**kwargs)
        attempt = attempts.task_claim(
            agent=agent or self.agent, project=self.project, lease_seconds=lease_seconds
        )
        assert attempt.task_id == task.pk, "another ready task was claimed first"
        task.refresh_from_db()
        return task, attempt

    def checking(self, **kwargs):
        task, attempt = self.claimed(**kwargs)
        attempt = attempts.attempt_submit(
            attempt=attempt,
            actor=attempt.agent,
            summary="done",
            change={"commit": "abc1230000000000000000000000000000000000"},
        )
        task.refresh_from_db()
        return task, attempt

    def in_review(self, **kwargs):
        task, attempt = self.checking(**kwargs)
        attempt.refresh_from_db()
        if attempt.state == "checking":  # not already concluded by gates run on commit
            attempt = attempts.attempt_gates_passed(attempt=attempt)
        task.refresh_from_db()
        return task, attempt

    def done(self, criteria=None, **kwargs):
        """Approved; unless ``criteria`` says otherwise, the reviewer marks every criterion met."""
        task, attempt = self.in_review(**kwargs)
        if criteria is None:
            criteria = all_met(attempt)
        return review.task_approve(task=task, actor=self.reviewer, criteria=criteria), attempt

    def blocked(self, **kwargs):
        task, attempt = self.claimed(**kwargs)
        attempts.attempt_release(attempt=attempt, actor=attempt.agent, reason="stuck", blocked=True)
        task.refresh_from_db()
        return task, attempt

    def failed(self, **kwargs):
        task, attempt = self.checking(max_attempts=1, **kwargs)
        attempts.attempt_gates_failed(attempt=attempt, reason="tests-pass: 1 failed")
        task.refresh_from_db()
        return task, attempt

    def cancelled(self, **kwargs):
        return services.task_cancel(task=self.draft(**kwargs), actor=self.manager, reason="no")

    def attach(
        self, attempt, content=b"log line\n", kind="log", actor=None, name="out.log", criteria=()
    ):
        return evidence_services.evidence_attach(
            attempt=attempt,
            actor=actor or attempt.agent,
            file=ContentFile(content, name=name),
            kind=kind,
            criteria=criteria,
        )


def submit_through_the_gates(attempt, commit: str, capture):
    """``attempt`` submitted at ``commit`` with its gates (the runner among them) run as the
    workers would (``capture``: pytest-django's ``django_capture_on_commit_callbacks``), and
    read back with its task."""
    with capture(execute=True):
        attempts.attempt_submit(
            attempt=attempt, actor=attempt.agent, summary="done", change={"commit": commit}
        )
    attempt.refresh_from_db()
    attempt.task.refresh_from_db()
    return attempt
