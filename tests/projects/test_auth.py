"""Bearer tokens: one query finds the token, its user and the user's roles."""

import pytest
from knox.models import AuthToken

from projects.auth import BearerTokenAuthentication
from projects.roles import roles_by_project
from tasks.models import Task

pytestmark = pytest.mark.django_db


def test_the_token_its_user_and_their_roles_come_in_one_query(flow, django_assert_num_queries):
    _, token = AuthToken.objects.create(user=flow.agent)

    with django_assert_num_queries(1):
        user, _ = BearerTokenAuthentication().authenticate_credentials(token.encode())
        roles = roles_by_project(user)

    assert (user, roles) == (flow.agent, {flow.project.pk: {"agent"}})


def test_a_user_of_several_projects_and_roles_gets_them_all(flow, other_flow):
    from projects.services import membership_grant

    membership_grant(user=flow.agent, project=flow.project, role="reviewer")
    membership_grant(user=flow.agent, project=other_flow.project, role="verifier")
    _, token = AuthToken.objects.create(user=flow.agent)

    user, _ = BearerTokenAuthentication().authenticate_credentials(token.encode())

    assert roles_by_project(user) == {
        flow.project.pk: {"agent", "reviewer"},
        other_flow.project.pk: {"verifier"},
    }


def test_a_user_with_no_role_has_none(db, django_user_model):
    user = django_user_model.objects.create_user("nobody")
    _, token = AuthToken.objects.create(user=user)

    authenticated, _ = BearerTokenAuthentication().authenticate_credentials(token.encode())

    assert roles_by_project(authenticated) == {}


def test_an_api_call_spends_no_query_on_roles(flow, api, django_assert_num_queries):
    flow.ready()
    client = api(flow.agent)

    # token+roles, the task list's page, its labels and dependencies
    with django_assert_num_queries(4):
        response = client.get("/api/v1/tasks/")

    assert (response.status_code, len(response.json()["results"])) == (200, Task.objects.count())
