"""Data migrations of the kernel: rows written before keep meaning what they meant."""

import weakref

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader
from django.db.models.signals import class_prepared
from django_fsm import FSMFieldMixin

from projects.models import Membership
from projects.services import membership_grant, memberships_sync
from projects.sso import REASON
from tasks.models import Task
from tests.factories import ProjectFactory, UserFactory


def migrate(target: list[tuple[str, str]]) -> None:
    MigrationExecutor(connection).migrate(target)


@pytest.mark.django_db(transaction=True)
def test_roles_single_sign_on_granted_before_the_mark_existed_are_marked_the_providers():
    fm = ProjectFactory(slug="FM")
    nora, ravi = UserFactory(username="nora"), UserFactory(username="ravi")
    memberships_sync(user=nora, grants={("FM", "manager")}, managed=set(), reason=REASON)
    membership_grant(user=nora, project=fm, role="reviewer", actor=ravi)  # in the admin
    membership_grant(user=ravi, project=fm, role="agent", reason="the demo's seed")  # system
    migrate([("projects", "0008_event_of_the_site")])

    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    marked = Membership.objects.filter(from_provider=True)
    assert list(marked.values_list("user__username", "role")) == [("nora", "manager")]
    assert Membership.objects.count() == 3


def fsm_fields_listening_to_class_prepared() -> list:
    found = []
    for _, receiver, _ in class_prepared.receivers:
        method = receiver() if isinstance(receiver, weakref.ReferenceType) else receiver
        if isinstance(getattr(method, "__self__", None), FSMFieldMixin):
            found.append(method.__self__)
    return found


def test_historical_models_leave_no_fsm_receiver_and_the_real_ones_keep_their_transitions():
    historical = MigrationLoader(None).project_state().apps.get_model("tasks", "Task")

    listening = fsm_fields_listening_to_class_prepared()

    assert historical._meta.get_field("state").transitions == {historical: {}}
    assert [f for f in listening if f.model.__module__ == "__fake__"] == []
    assert "claim" in Task._meta.get_field("state").transitions[Task]
