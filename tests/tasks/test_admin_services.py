"""Every admin save goes through the services: it writes its Event, and a refusal is a form
error on the page the user filled in, never a 500, with nothing saved."""

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from decisions.models import Spec
from projects.models import Event, Membership, Project
from projects.roles import Role
from tasks.models import Task
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

POLICY = '{"coverage": {"threshold": 0.9}, "tests-pass": {}}'


def admin_url(model, view, *args):
    opts = model._meta
    return reverse(f"admin:{opts.app_label}_{opts.model_name}_{view}", args=args)


@pytest.fixture
def root(django_user_model):
    return django_user_model.objects.create_superuser("root", "root@example.invalid", "pw")


@pytest.fixture
def staff(client):
    """A staff user with the admin's permissions on tasks and projects, but no project role."""
    user = UserFactory(username="staff", is_staff=True)
    codenames = ["add_task", "change_task", "view_task", "change_project", "view_project"]
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    client.force_login(user)
    return user


def project_form(project, **changes):
    data = {
        "name": project.name,
        "repository_url": project.repository_url,
        "gate_policy": '{"tests-pass": {}}',
        "max_attempts": project.max_attempts,
        "memberships-TOTAL_FORMS": 0,
        "memberships-INITIAL_FORMS": 0,
        "memberships-MIN_NUM_FORMS": 0,
        "memberships-MAX_NUM_FORMS": 1000,
    }
    return {**data, **changes}


def test_editing_the_gate_policy_in_the_admin_writes_an_event(client, root, flow):
    client.force_login(root)

    response = client.post(
        admin_url(Project, "change", flow.project.pk),
        project_form(flow.project, gate_policy=POLICY),
    )

    assert response.status_code == 302
    event = Event.objects.get(object_key="FM", transition="edit")
    assert (event.actor, event.extra) == (
        root,
        {
            "fields": ["gate_policy"],
            "gate_policy": {"coverage": {"threshold": 0.9}, "tests-pass": {}},
        },
    )


def test_an_unknown_gate_in_the_admin_is_a_field_error_and_changes_nothing(client, root, flow):
    client.force_login(root)
    before, events = (
        Project.objects.filter(pk=flow.project.pk).values().get(),
        Event.objects.count(),
    )

    response = client.post(
        admin_url(Project, "change", flow.project.pk),
        project_form(flow.project, gate_policy='{"no-such-gate": {}}'),
    )

    assert response.status_code == 200
    assert (
        response.context["adminform"]
        .form.errors["gate_policy"][0]
        .startswith("unknown gate 'no-such-gate'")
    )
    assert Project.objects.filter(pk=flow.project.pk).values().get() == before
    assert Event.objects.count() == events


def test_a_staff_user_without_the_manager_role_cannot_edit_a_project(client, staff, flow):
    events = Event.objects.count()

    response = client.post(
        admin_url(Project, "change", flow.project.pk),
        project_form(flow.project, gate_policy=POLICY),
    )

    assert response.status_code == 200
    assert response.context["adminform"].form.non_field_errors() == [
        "this needs the manager role in the project"
    ]
    assert Project.objects.get(pk=flow.project.pk).gate_policy != {
        "coverage": {"threshold": 0.9},
        "tests-pass": {},
    }
    assert Event.objects.count() == events


def test_a_staff_user_without_the_manager_role_adding_a_task_gets_a_form_error(client, staff, flow):
    events = Event.objects.count()

    response = client.post(
        admin_url(Task, "add"),
        {
            "project": flow.project.pk,
            "title": "Sneaked in",
            "priority": 0,
            "allowed_paths": "[]",
            "max_attempts": 3,
            "attempts-TOTAL_FORMS": 0,
            "attempts-INITIAL_FORMS": 0,
        },
    )

    assert response.status_code == 200
    assert response.context["adminform"].form.non_field_errors() == [
        "this needs the manager role in the project"
    ]
    assert response.context["adminform"].form["title"].value() == "Sneaked in"
    assert (Task.objects.count(), Event.objects.count()) == (0, events)


def test_granting_a_role_in_the_admin_is_recorded(client, root, flow):
    user = UserFactory(username="newcomer")
    client.force_login(root)

    response = client.post(
        admin_url(Membership, "add"),
        {"user": user.pk, "project": flow.project.pk, "role": Role.REVIEWER},
    )

    assert response.status_code == 302
    assert Membership.objects.filter(user=user, project=flow.project, role="reviewer").exists()
    event = Event.objects.get(transition="grant", extra__user="newcomer")
    assert (event.actor, event.project, event.extra) == (
        root,
        flow.project,
        {"user": "newcomer", "role": "reviewer"},
    )


def test_revoking_a_role_in_the_admin_is_recorded(client, root, flow):
    membership = Membership.objects.get(user=flow.reviewer, role="reviewer")
    client.force_login(root)

    response = client.post(admin_url(Membership, "delete", membership.pk), {"post": "yes"})

    assert response.status_code == 302
    assert not Membership.objects.filter(pk=membership.pk).exists()
    event = Event.objects.get(transition="revoke")
    assert (event.actor, event.extra) == (
        root,
        {"user": flow.reviewer.username, "role": "reviewer"},
    )


def test_a_role_granted_on_the_project_page_is_recorded(client, root, flow):
    user = UserFactory(username="inline")
    client.force_login(root)
    form = project_form(
        flow.project,
        **{
            "memberships-TOTAL_FORMS": 1,
            "memberships-0-user": user.pk,
            "memberships-0-role": Role.AGENT,
        },
    )

    response = client.post(admin_url(Project, "change", flow.project.pk), form)

    assert response.status_code == 302
    event = Event.objects.get(transition="grant", extra__user="inline")
    assert (event.actor, event.extra["role"]) == (root, "agent")


@pytest.mark.parametrize("model", [Project, Task], ids=lambda m: m.__name__)
def test_projects_and_tasks_are_never_deleted_through_the_admin(client, root, flow, model):
    obj = flow.draft() if model is Task else flow.project
    client.force_login(root)

    response = client.post(admin_url(model, "delete", obj.pk), {"post": "yes"})

    assert response.status_code == 403
    assert model.objects.filter(pk=obj.pk).exists()


def test_a_specs_title_is_not_changed_behind_its_versions_back(client, root, flow):
    spec = flow.spec()
    client.force_login(root)

    response = client.post(admin_url(Spec, "change", spec.pk), {"title": "Rewritten"})

    assert response.status_code == 403
    assert Spec.objects.get(pk=spec.pk).title == "Claiming"
