"""A project's code host: set by managers through the one service; credentials are named,
never given, and only by FACTORY_HOST_ variables the server sets; the API base is one the
operator lists; a repository on a host serves one project. Each refusal changes nothing."""

import pytest
from django.db import IntegrityError, transaction

from projects import services
from projects.errors import Conflict
from projects.models import Event, Project
from tests.factories import ProjectFactory

TOKEN = {
    "provider": "github",
    "repository": "octo-org/widgets",
    "token_env": "FACTORY_HOST_WIDGETS_TOKEN",
    "webhook_secret_env": "FACTORY_HOST_WIDGETS_HOOK",
}
APP = {
    "provider": "github",
    "repository": "octo-org/widgets",
    "app_id": 123456,
    "installation_id": 987654321,
    "private_key_env": "FACTORY_HOST_APP_KEY",
    "webhook_secret_env": "FACTORY_HOST_APP_HOOK",
}


@pytest.fixture(autouse=True)
def _no_host_to_reach(settings):
    # These are the block's own rules; no GitHub is reachable from here. Reaching the host
    # at save is tests/codehosts/test_save_check.py's, against the stand-in.
    settings.FACTORY_CODE_HOST_CHECK_AT_SAVE = False


@pytest.fixture
def variables(monkeypatch):
    for name in (
        "FACTORY_HOST_WIDGETS_TOKEN",
        "FACTORY_HOST_WIDGETS_HOOK",
        "FACTORY_HOST_APP_KEY",
        "FACTORY_HOST_APP_HOOK",
    ):
        monkeypatch.setenv(name, f"value of {name}")


def patch(api, flow, code_host, user=None):
    return api(user or flow.manager).patch(
        f"/api/v1/projects/{flow.project.slug}/", {"code_host": code_host}, format="json"
    )


def test_a_project_has_no_code_host_until_a_manager_gives_it_one(flow, api):
    body = api(flow.agent).get(f"/api/v1/projects/{flow.project.slug}/").json()

    assert body["code_host"] == {"provider": "none"}


def test_a_manager_names_a_token_and_the_host_is_on_record_with_the_default_api(
    flow, api, variables
):
    response = patch(api, flow, TOKEN)

    assert response.status_code == 200
    expected = {**TOKEN, "api_url": "https://api.github.com", "issues": None}
    assert response.json()["code_host"] == expected
    flow.project.refresh_from_db()
    assert flow.project.code_host == expected
    event = Event.objects.filter(transition="edit").latest("id")
    assert event.extra["fields"] == ["code_host"]
    assert event.extra["code_host"] == expected


def test_a_github_app_is_named_by_its_ids_and_its_keys_variable(flow, api, variables):
    response = patch(api, flow, {**APP, "issues": {"label": "factory"}})

    assert response.status_code == 200
    assert response.json()["code_host"]["app_id"] == 123456
    assert response.json()["code_host"]["issues"] == {"label": "factory"}


def test_no_secret_is_stored_shown_or_recorded_only_the_names(flow, api, variables):
    patch(api, flow, TOKEN)

    shown = api(flow.manager).get(f"/api/v1/projects/{flow.project.slug}/").text
    flow.project.refresh_from_db()
    recorded = str(Event.objects.filter(transition="edit").latest("id").extra)
    for text in (shown, str(flow.project.code_host), recorded):
        assert "value of" not in text
        assert "FACTORY_HOST_WIDGETS_TOKEN" in text


@pytest.mark.parametrize(
    ("code_host", "field"),
    [
        # Another of the server's variables: the site would send it to the host.
        ({**TOKEN, "token_env": "SECRET_KEY"}, "code_host.token_env"),
        ({**TOKEN, "token_env": "DATABASE_URL"}, "code_host.token_env"),
        ({**TOKEN, "webhook_secret_env": "FACTORY_S3_SECRET_KEY"}, "code_host.webhook_secret_env"),
        ({**APP, "private_key_env": "factory_host_key"}, "code_host.private_key_env"),
        # A secret given instead of its name.
        ({**TOKEN, "token_env": "ghp_16C7e42F292c6912E7710c838347Ae178B4a"}, "code_host.token_env"),
        # A server of the manager's own.
        ({**TOKEN, "api_url": "https://evil.example.com"}, "code_host.api_url"),
        ({**TOKEN, "api_url": "https://api.github.com.evil.example.com"}, "code_host.api_url"),
        ({**TOKEN, "api_url": "http://127.0.0.1:8000"}, "code_host.api_url"),
    ],
)
def test_a_credential_other_than_a_factory_host_variable_or_an_api_of_ones_own_is_refused(
    flow, api, variables, code_host, field
):
    before = Event.objects.count()

    response = patch(api, flow, code_host)

    assert response.status_code == 400
    assert field in response.json()["fields"]
    flow.project.refresh_from_db()
    assert flow.project.code_host == {"provider": "none"}
    assert Event.objects.count() == before


@pytest.mark.parametrize(
    ("code_host", "errors"),
    [
        ({"provider": "gitlab"}, {"code_host.provider": ["choose one of none, github"]}),
        ({"provider": "none", "repository": "a/b"}, {"code_host.repository"}),
        ({**TOKEN, "repository": "widgets"}, {"code_host.repository"}),
        ({**TOKEN, "repository": "octo-org/.."}, {"code_host.repository"}),
        ({**TOKEN, "repository": "-octo/widgets"}, {"code_host.repository"}),
        ({**TOKEN, "private_key_env": "FACTORY_HOST_APP_KEY"}, {"code_host.token_env"}),
        ({k: v for k, v in TOKEN.items() if k != "token_env"}, {"code_host.token_env"}),
        ({k: v for k, v in APP.items() if k != "installation_id"}, {"code_host.installation_id"}),
        ({**APP, "app_id": 0}, {"code_host.app_id"}),
        ({**APP, "app_id": "123"}, {"code_host.app_id"}),
        (
            {k: v for k, v in TOKEN.items() if k != "webhook_secret_env"},
            {"code_host.webhook_secret_env"},
        ),
        ({**TOKEN, "issues": {"label": ""}}, {"code_host.issues"}),
        ({**TOKEN, "issues": {"label": "x" * 51}}, {"code_host.issues"}),
        ({**TOKEN, "issues": "factory"}, {"code_host.issues"}),
        ({**TOKEN, "token": "ghp_x"}, {"code_host.token"}),
        ("github", {"code_host"}),
    ],
)
def test_a_bad_code_host_field_is_a_400_naming_it_and_changes_nothing(
    flow, api, variables, code_host, errors
):
    before = Event.objects.count()

    response = patch(api, flow, code_host)

    assert response.status_code == 400
    fields = response.json()["fields"]
    assert fields == errors if isinstance(errors, dict) else set(fields) == errors
    flow.project.refresh_from_db()
    assert flow.project.code_host == {"provider": "none"}
    assert Event.objects.count() == before


def test_a_variable_this_server_does_not_set_is_409_naming_it_and_changes_nothing(
    flow, api, monkeypatch
):
    monkeypatch.setenv("FACTORY_HOST_WIDGETS_HOOK", "s3cret")
    monkeypatch.delenv("FACTORY_HOST_WIDGETS_TOKEN", raising=False)
    before = Event.objects.count()

    response = patch(api, flow, TOKEN)

    assert response.status_code == 409
    assert response.json()["code"] == "code_host_unconfigured"
    assert "FACTORY_HOST_WIDGETS_TOKEN" in response.json()["detail"]
    assert "s3cret" not in response.text
    flow.project.refresh_from_db()
    assert flow.project.code_host == {"provider": "none"}
    assert Event.objects.count() == before


def test_an_api_base_the_operator_adds_may_be_named(flow, api, variables, settings):
    settings.FACTORY_CODE_HOST_URLS = ["https://api.github.com", "https://ghe.example.com/api/v3"]

    response = patch(api, flow, {**TOKEN, "api_url": "https://ghe.example.com/api/v3/"})

    assert response.status_code == 200
    assert response.json()["code_host"]["api_url"] == "https://ghe.example.com/api/v3"


def test_a_repository_another_project_follows_is_409_whatever_its_letters_case(
    flow, api, variables
):
    ProjectFactory(code_host={**TOKEN, "api_url": "https://api.github.com", "issues": None})
    before = Event.objects.count()

    response = patch(api, flow, {**TOKEN, "repository": "Octo-Org/Widgets"})

    assert response.status_code == 409
    assert response.json()["code"] == "repository_in_use"
    flow.project.refresh_from_db()
    assert flow.project.code_host == {"provider": "none"}
    assert Event.objects.count() == before


@pytest.mark.django_db
def test_the_database_keeps_a_repository_to_one_project_when_two_take_it_at_once(variables):
    taken = {**TOKEN, "api_url": "https://api.github.com", "issues": None}
    ProjectFactory(code_host=taken)

    with pytest.raises(IntegrityError), transaction.atomic():
        Project.objects.create(
            slug="TWO", name="Two", code_host={**taken, "repository": "OCTO-ORG/widgets"}
        )

    assert Project.objects.filter(code_host__repository__iexact="octo-org/widgets").count() == 1


def test_only_a_manager_sets_the_code_host_and_a_refusal_changes_nothing(flow, api, variables):
    before = Event.objects.count()

    response = patch(api, flow, TOKEN, user=flow.reviewer)

    assert response.status_code == 403
    flow.project.refresh_from_db()
    assert flow.project.code_host == {"provider": "none"}
    assert Event.objects.count() == before


def test_taking_the_code_host_away_is_none_again(flow, api, variables):
    patch(api, flow, TOKEN)

    response = patch(api, flow, {"provider": "none"})

    assert response.status_code == 200
    assert response.json()["code_host"] == {"provider": "none"}


def test_the_service_refuses_what_the_api_refuses(flow, variables):
    with pytest.raises(Conflict):
        services.project_update(
            project=flow.project,
            actor=flow.manager,
            code_host={**TOKEN, "token_env": "FACTORY_HOST_NOT_SET_ANYWHERE"},
        )
