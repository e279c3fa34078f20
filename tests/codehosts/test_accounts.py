"""Who is who, against the stand-in: a manager links the host's account to a member by the
host's number for it, so a renamed login still finds the member; only the project's
managers link, every refusal stores nothing; single sign-on's identity of the operator's
issuer is the account too; an account nobody linked is shown as its login on the host."""

import pytest
from django.template import Context, Template

from codehosts.identities import host_account_link, shown, user_for
from codehosts.models import HostAccount, TaskIssue
from codehosts.providers import HostUser, provider_for
from projects.models import Event, Identity
from projects.roles import Role
from tests.factories import member

ACCOUNTS = "/api/v1/projects/WID/code-host/accounts/"


@pytest.fixture
def ann(hosted, github):
    """Ann, an agent of the project here, and ``ann`` on GitHub (``world``: the stand-in's)."""
    hosted.world = github.world
    hosted.ann = member(hosted.project, Role.AGENT, "ann-here")
    hosted.ann.first_name, hosted.ann.last_name = "Ann", "Lee"
    hosted.ann.save()
    hosted.ann_id = github.world.person("ann")
    return hosted


def accounts_and_events():
    return list(HostAccount.objects.values_list("host_id", "login", "user__username")), list(
        Event.objects.filter(transition__in=["link", "unlink"]).values_list("transition", flat=True)
    )


def test_the_provider_names_an_account_by_its_number(ann):
    host = provider_for(ann.project)

    assert host.user("ANN") == HostUser(id=ann.ann_id, login="ann")


def test_a_manager_links_a_login_and_the_member_is_found_by_number_after_a_rename(ann, api):
    response = api(ann.manager).post(ACCOUNTS, {"login": "ann", "user": "ann-here"}, format="json")
    ann.world.rename("ann", "ann-lee")

    assert response.status_code == 200, response.json()
    assert response.json()["host_id"] == ann.ann_id
    assert response.json()["user"] == "ann-here"
    assert user_for(ann.project, host_id=ann.ann_id) == ann.ann
    assert provider_for(ann.project).user("ann-lee").id == ann.ann_id
    assert accounts_and_events() == ([(ann.ann_id, "ann", "ann-here")], ["link"])
    event = Event.objects.get(transition="link")
    assert (event.project, event.actor) == (ann.project, ann.manager)


def test_a_login_someone_else_took_after_a_rename_is_not_the_member(ann):
    host_account_link(actor=ann.manager, project=ann.project, login="ann", user=ann.ann)
    ann.world.rename("ann", "ann-lee")
    stranger = ann.world.person("ann")

    assert user_for(ann.project, host_id=stranger) is None
    assert shown(ann.project, "ann", host_id=stranger) == "ann on GitHub"


def test_linking_the_same_account_to_the_same_member_again_changes_nothing(ann):
    host_account_link(actor=ann.manager, project=ann.project, login="ann", user=ann.ann)
    host_account_link(actor=ann.manager, project=ann.project, login="Ann", user=ann.ann)

    assert accounts_and_events() == ([(ann.ann_id, "ann", "ann-here")], ["link"])


def test_a_non_managers_link_is_refused_and_changes_nothing(ann, api):
    response = api(ann.reviewer).post(ACCOUNTS, {"login": "ann", "user": "ann-here"}, format="json")

    assert response.status_code == 403
    assert accounts_and_events() == ([], [])


def test_another_projects_manager_gets_404_and_nothing_changes(ann, api, other_flow):
    response = api(other_flow.manager).post(
        ACCOUNTS, {"login": "ann", "user": "ann-here"}, format="json"
    )

    assert response.status_code == 404
    assert accounts_and_events() == ([], [])


@pytest.mark.parametrize(
    ("login", "user", "field"),
    [
        ("nobody-here", "ann-here", "login"),
        ("ann", "ot-manager", "user"),
        ("ann", "no-such-user", "user"),
        ("-ann", "ann-here", "login"),
        ("an--n", "ann-here", "login"),
        ("a" * 40, "ann-here", "login"),
        ("ann/../../repos", "ann-here", "login"),
    ],
)
def test_a_bad_link_is_400_naming_the_field_and_stores_nothing(
    ann, api, other_flow, login, user, field
):
    response = api(ann.manager).post(ACCOUNTS, {"login": login, "user": user}, format="json")

    assert response.status_code == 400, response.json()
    assert list(response.json()["fields"]) == [field]
    assert accounts_and_events() == ([], [])


def test_an_account_linked_to_one_member_cannot_be_linked_to_another(ann, api):
    host_account_link(actor=ann.manager, project=ann.project, login="ann", user=ann.ann)

    response = api(ann.manager).post(ACCOUNTS, {"login": "ann", "user": "wid-agent"}, format="json")

    assert response.status_code == 409
    assert response.json()["code"] == "host_account_linked"
    assert accounts_and_events() == ([(ann.ann_id, "ann", "ann-here")], ["link"])


def test_a_manager_unlinks_and_the_account_is_shown_as_its_login_again(ann, api):
    host_account_link(actor=ann.manager, project=ann.project, login="ann", user=ann.ann)

    response = api(ann.manager).delete(f"{ACCOUNTS}{ann.ann_id}/")

    assert response.status_code == 204
    assert user_for(ann.project, host_id=ann.ann_id) is None
    assert shown(ann.project, "ann", host_id=ann.ann_id) == "ann on GitHub"
    assert accounts_and_events() == ([], ["link", "unlink"])


def test_unlinking_an_account_not_linked_is_404(ann, api):
    response = api(ann.manager).delete(f"{ACCOUNTS}{ann.ann_id}/")

    assert response.status_code == 404
    assert accounts_and_events() == ([], [])


def test_members_read_the_links(ann, api):
    host_account_link(actor=ann.manager, project=ann.project, login="ann", user=ann.ann)

    response = api(ann.agent).get(ACCOUNTS)

    assert response.status_code == 200
    assert [(a["login"], a["user"], a["linked_by"]) for a in response.json()["results"]] == [
        ("ann", "ann-here", "wid-manager")
    ]


def test_a_member_signed_in_with_the_hosts_identity_is_that_account(ann, settings):
    settings.FACTORY_CODE_HOST_SSO_ISSUER = "https://github.com"
    Identity.objects.create(user=ann.ann, issuer="https://github.com", subject=str(ann.ann_id))

    assert user_for(ann.project, host_id=ann.ann_id) == ann.ann
    assert shown(ann.project, "ann", host_id=ann.ann_id) == "Ann Lee"


def test_single_sign_on_is_not_heard_unless_the_operator_names_the_issuer(ann):
    Identity.objects.create(user=ann.ann, issuer="https://github.com", subject=str(ann.ann_id))

    assert user_for(ann.project, host_id=ann.ann_id) is None


def test_an_identity_of_someone_outside_the_project_is_nobody_here(ann, settings, other_flow):
    settings.FACTORY_CODE_HOST_SSO_ISSUER = "https://github.com"
    Identity.objects.create(
        user=other_flow.agent, issuer="https://github.com", subject=str(ann.ann_id)
    )

    assert user_for(ann.project, host_id=ann.ann_id) is None


def test_an_account_single_sign_on_gives_to_one_member_is_not_linked_to_another(ann, settings):
    settings.FACTORY_CODE_HOST_SSO_ISSUER = "https://github.com"
    Identity.objects.create(user=ann.ann, issuer="https://github.com", subject=str(ann.ann_id))

    with pytest.raises(Exception, match="through single sign-on"):
        host_account_link(actor=ann.manager, project=ann.project, login="ann", user=ann.agent)
    assert accounts_and_events() == ([], [])


def test_an_unknown_author_is_shown_as_the_host_login(ann):
    host_account_link(actor=ann.manager, project=ann.project, login="ann", user=ann.ann)
    page = Template("{% load codehosts %}{{ login|on_host:project }}")

    assert page.render(Context({"login": "ann", "project": ann.project})) == "Ann Lee"
    assert page.render(Context({"login": "octocat", "project": ann.project})) == "octocat on GitHub"


def issue_task(flow, author):
    task = flow.ready(title="From an issue")
    TaskIssue.objects.create(
        task=task, number=7, url="https://standin.invalid/i/7", author=author, state="open"
    )
    return task


def test_the_task_page_names_an_issues_unknown_author_by_login_even_if_a_user_here_has_it(
    ann, client
):
    member(ann.project, Role.AGENT, "octocat")
    task = issue_task(ann, "octocat")
    client.force_login(ann.reviewer)

    page = client.get(f"/tasks/{task.key}/").content.decode()

    assert "issue #7</a> by octocat on GitHub" in page


def test_the_task_page_names_a_linked_issue_author_by_the_members_name(ann, client):
    host_account_link(actor=ann.manager, project=ann.project, login="ann", user=ann.ann)
    task = issue_task(ann, "ann")
    client.force_login(ann.reviewer)

    page = client.get(f"/tasks/{task.key}/").content.decode()

    assert "issue #7</a> by Ann Lee" in page


def test_the_admin_shows_the_links_and_changes_none(ann, admin_client):
    account = host_account_link(actor=ann.manager, project=ann.project, login="ann", user=ann.ann)

    listing = admin_client.get("/admin/codehosts/hostaccount/")
    deleting = admin_client.post(
        f"/admin/codehosts/hostaccount/{account.pk}/delete/", {"post": "yes"}
    )

    assert listing.status_code == 200
    assert "ann" in listing.content.decode()
    assert deleting.status_code == 403
    assert accounts_and_events() == ([(ann.ann_id, "ann", "ann-here")], ["link"])


def test_a_host_that_cannot_answer_is_503_and_nothing_is_linked(ann, api, github):
    github.fail("502", count=5, match="GET /users/ann")

    response = api(ann.manager).post(ACCOUNTS, {"login": "ann", "user": "ann-here"}, format="json")

    assert response.status_code == 503
    assert response.json()["code"] == "code_host_unavailable"
    assert accounts_and_events() == ([], [])
