"""Nobody decides their own decision: not its proposer, nor the agent of the attempt it was
proposed in, whatever other roles they hold, and through every face (service, API, pages,
admin). Each refusal leaves the decision, the ones it supersedes and the audit trail as
they were."""

import pytest
from django.urls import reverse

from decisions import services
from decisions.models import Decision
from projects.errors import PermissionDenied
from projects.models import Event
from projects.roles import Role
from projects.services import membership_grant

pytestmark = pytest.mark.django_db


def propose(flow, actor, **kwargs):
    return services.decision_propose(
        project=flow.project, actor=actor, title="T", context="C", decision="D", **kwargs
    )


def accepted(flow):
    return services.decision_accept(decision=propose(flow, flow.manager), actor=flow.reviewer)


def states(*decisions):
    return [Decision.objects.get(pk=d.pk).state for d in decisions]


def test_a_reviewer_cannot_accept_her_own_decision_that_supersedes_two(flow):
    old = [accepted(flow), accepted(flow)]
    mine = propose(flow, flow.reviewer, supersedes=old)
    events = Event.objects.count()

    with pytest.raises(PermissionDenied) as refused:
        services.decision_accept(decision=mine, actor=flow.reviewer)

    assert (refused.value.code, refused.value.detail) == (
        "own_work",
        "you proposed FM-D3; another reviewer or manager must decide it",
    )
    assert states(mine, *old) == ["proposed", "accepted", "accepted"]
    assert Event.objects.count() == events


def test_an_agent_who_is_also_a_reviewer_cannot_accept_what_his_attempt_proposed(flow):
    _, attempt = flow.claimed()
    membership_grant(user=flow.agent, project=flow.project, role=Role.REVIEWER)
    mine = propose(flow, flow.agent, attempt=attempt)
    events = Event.objects.count()

    with pytest.raises(PermissionDenied) as refused:
        services.decision_accept(decision=mine, actor=flow.agent)

    assert refused.value.code == "own_work"
    assert (states(mine), Event.objects.count()) == (["proposed"], events)


def test_the_agent_of_the_proposing_attempt_is_refused_even_if_someone_else_proposed(flow):
    _, attempt = flow.claimed()
    membership_grant(user=flow.agent, project=flow.project, role=Role.MANAGER)
    decision = propose(flow, flow.reviewer)
    # As if another proposer had carried it through the agent's attempt.
    Decision.objects.filter(pk=decision.pk).update(proposed_in=attempt)

    with pytest.raises(PermissionDenied) as refused:
        services.decision_reject(decision=decision, actor=flow.agent, reason="mine")

    assert (refused.value.code, states(decision)) == ("own_work", ["proposed"])


def test_the_proposer_cannot_reject_it_either(flow):
    mine = propose(flow, flow.manager)

    with pytest.raises(PermissionDenied) as refused:
        services.decision_reject(decision=mine, actor=flow.manager, reason="changed my mind")

    assert (refused.value.code, states(mine)) == ("own_work", ["proposed"])


def test_a_superuser_cannot_accept_a_decision_she_proposed(flow, django_user_model):
    admin = django_user_model.objects.create_superuser("root", "root@example.invalid", "pw")
    mine = propose(flow, admin)

    with pytest.raises(PermissionDenied) as refused:
        services.decision_accept(decision=mine, actor=admin)

    assert (refused.value.code, states(mine)) == ("own_work", ["proposed"])


def test_an_amending_decision_proposed_by_a_manager_needs_another_manager(flow):
    spec = flow.spec()
    amendment = {"spec": spec, "body": "# v2\n", "criteria": []}
    mine = propose(flow, flow.manager, amendments=[amendment])
    other = flow.reviewer  # a reviewer may not decide an amendment at all

    for actor, code in ((flow.manager, "own_work"), (other, "permission_denied")):
        with pytest.raises(PermissionDenied) as refused:
            services.decision_accept(decision=mine, actor=actor)
        assert refused.value.code == code
    assert (states(mine), spec.versions.count()) == (["proposed"], 1)


def test_another_reviewer_accepts_it(flow):
    mine = propose(flow, flow.manager)

    decision = services.decision_accept(decision=mine, actor=flow.reviewer)

    assert (decision.state, decision.decided_by) == ("accepted", flow.reviewer)


def test_the_api_refuses_own_work_with_403_and_changes_nothing(flow, api):
    mine = propose(flow, flow.reviewer)
    events = Event.objects.count()

    response = api(flow.reviewer).post(f"/api/v1/decisions/{mine.key}/accept/", {}, format="json")

    assert (response.status_code, response.json()) == (
        403,
        {
            "detail": "you proposed FM-D1; another reviewer or manager must decide it",
            "code": "own_work",
        },
    )
    assert (states(mine), Event.objects.count()) == (["proposed"], events)


def test_the_page_offers_the_proposer_no_verdict_and_refuses_one_posted(client, flow):
    mine = propose(flow, flow.reviewer)
    events = Event.objects.count()
    client.force_login(flow.reviewer)

    page = client.get(f"/decisions/{mine.key}/").content.decode()
    response = client.post(f"/decisions/{mine.key}/accept/", {"reason": "fine"}, follow=True)

    assert f'action="/decisions/{mine.key}/accept/"' not in page
    assert [str(m) for m in response.context["messages"]] == [
        "FM-D1 not accepted: you proposed FM-D1; another reviewer or manager must decide it"
    ]
    assert (states(mine), Event.objects.count()) == (["proposed"], events)


def test_the_admin_action_refuses_own_work_with_a_message(client, django_user_model, flow):
    admin = django_user_model.objects.create_superuser("root", "root@example.invalid", "pw")
    mine = propose(flow, admin)
    events = Event.objects.count()
    client.force_login(admin)

    response = client.post(
        reverse("admin:decisions_decision_changelist"),
        {"action": "accept", "_selected_action": [mine.pk]},
        follow=True,
    )

    assert [str(m) for m in response.context["messages"]] == [
        "FM-D1: you proposed FM-D1; another reviewer or manager must decide it"
    ]
    assert (states(mine), Event.objects.count()) == (["proposed"], events)
