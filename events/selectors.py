"""Reads of the events app: the subscriptions and deliveries a manager may see."""

from events.models import Delivery, Subscription
from projects.models import Project
from projects.roles import Role
from projects.selectors import visible_project
from projects.services import require_role


def managed_project(user, slug: str) -> Project:
    """The project ``slug`` if ``user`` manages it: 404 for a non-member, 403 for a member
    with another role (a subscription's URL and log are a manager's business)."""
    project = visible_project(user, slug)
    require_role(user, project.pk, Role.MANAGER)
    return project


def subscription_of(project: Project, pk: int) -> Subscription:
    return Subscription.objects.select_related("project").get(project=project, pk=pk)


def delivery_of(subscription: Subscription, pk: int) -> Delivery:
    return Delivery.objects.select_related("subscription__project").get(
        subscription=subscription, pk=pk
    )
