"""Reads for tasks and attempts: what a caller may see, and what an agent may claim."""

from collections.abc import Iterable
from datetime import datetime

from django.db.models import Exists, F, OuterRef, Q, QuerySet

from tasks.models import Attempt, AttemptState, Label, Membership, Project, Task, TaskState
from tasks.roles import Role


def project_ids_for(user, *roles: str) -> list[int]:
    """Projects where ``user`` holds one of ``roles`` (any role if none given)."""
    if user is None or not user.is_authenticated:
        return []
    if user.is_superuser and (not roles or {Role.REVIEWER, Role.MANAGER} & set(roles)):
        return list(Project.objects.values_list("pk", flat=True))
    memberships = Membership.objects.filter(user=user)
    if roles:
        memberships = memberships.filter(role__in=roles)
    return sorted(set(memberships.values_list("project_id", flat=True)))


def claimable_tasks(
    *, project_ids: Iterable[int], labels: Iterable[str] = (), now: datetime
) -> QuerySet[Task]:
    """Tasks an agent may claim now, best first (priority, then age).

    A task is claimable when it is ready, or claimed under a lease that has run out
    (lease expiry applied lazily at claim time); all its dependencies are done; it has
    attempts left; and it carries every label asked for.
    """
    expired_lease = Attempt.objects.filter(
        pk=OuterRef("current_attempt_id"), state=AttemptState.RUNNING, lease_expires_at__lte=now
    )
    open_dependency = Task.depends_on.through.objects.filter(from_task=OuterRef("pk")).exclude(
        to_task__state=TaskState.DONE
    )
    tasks = (
        Task.objects.filter(project_id__in=list(project_ids))
        .alias(has_expired_lease=Exists(expired_lease))
        .filter(Q(state=TaskState.READY) | Q(state=TaskState.CLAIMED, has_expired_lease=True))
        .filter(failed_attempts__lt=F("max_attempts"))
        .exclude(Exists(open_dependency))
    )
    for name in set(labels):
        tasks = tasks.filter(
            Exists(Label.tasks.through.objects.filter(task=OuterRef("pk"), label__name=name))
        )
    return tasks.order_by("-priority", "created_at", "pk")


def visible_tasks(user) -> QuerySet[Task]:
    """Tasks in the projects ``user`` is a member of; everything else does not exist for them."""
    return Task.objects.filter(project_id__in=project_ids_for(user))


def task_for(user, key: str) -> Task:
    """The task ``key`` if ``user`` may see it; ``Task.DoesNotExist`` (a 404) otherwise."""
    return visible_tasks(user).select_related("project", "spec", "current_attempt").get(key=key)


def attempt_for(user, attempt_id) -> Attempt:
    """The attempt if it is in one of ``user``'s projects; ``Attempt.DoesNotExist`` otherwise."""
    return (
        Attempt.objects.filter(task__project_id__in=project_ids_for(user))
        .select_related("task__project", "agent", "spec_version__spec", "reviewed_by")
        .get(pk=attempt_id)
    )
