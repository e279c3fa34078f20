import pytest

from codehosts.providers.github_calls import token_cache
from projects import services as project_services
from projects.models import Project
from tests.codehosts.through import STRICT, TeamCI, verified_by_the_runner
from tests.factories import Flow, ProjectFactory
from tests.github_standin import app_key
from tests.github_standin.server import StandIn
from tests.github_standin.world import World
from tests.landing.conftest import Origin, Script

APP_ID = 4242
REPOSITORY = "octo-org/widgets"
KEY_ENV = "FACTORY_HOST_WIDGETS_APP_KEY"
TOKEN_ENV = "FACTORY_HOST_WIDGETS_TOKEN"
# What the sweep counts besides pull requests and deliveries, when it had none to do.
NOTHING_MORE = {
    "line_comments_posted": 0,
    "line_comments_failed": 0,
    "issues_created": 0,
    "issues_read": 0,
    "issues_left": 0,
    "issues_failed": 0,
}


@pytest.fixture
def github(tmp_path):
    """A GitHub stand-in on loopback; the test fails if any exchange broke GitHub's
    description (a call it does not have, a body or an answer that does not match)."""
    (tmp_path / "github").mkdir()
    world = World(tmp_path / "github", APP_ID, [app_key()[1]], "factory-memory")
    standin = StandIn(world).start()
    # The provider keeps installation tokens per API address for the process: a stand-in
    # on an address an earlier test's had must not be offered that one's tokens (its
    # first call then answered 401 and was made again, with a fresh token).
    token_cache(standin.url.rstrip("/")).forget_installation_tokens()
    yield standin
    standin.stop()
    assert standin.violations == []


@pytest.fixture
def repo(github):
    repo = github.world.repository(REPOSITORY)
    repo.git.commit("main", {"README.md": "widgets\n"}, "start")
    return repo


@pytest.fixture
def installation(github, repo):
    return github.world.install("octo-org", [REPOSITORY])


def project_on(github, settings, **credentials) -> Project:
    """An unsaved project whose code host is the stand-in (the operator lists it)."""
    settings.FACTORY_CODE_HOST_URLS = [github.url]
    return Project(
        slug="WID",
        code_host={
            "provider": "github",
            "api_url": github.url,
            "repository": REPOSITORY,
            "webhook_secret_env": "FACTORY_HOST_WIDGETS_HOOK",
            "issues": None,
            **credentials,
        },
    )


@pytest.fixture
def waits():
    """The waits the provider asked for, instead of sleeping them."""
    return []


@pytest.fixture
def app_host(github, installation, settings, monkeypatch, waits):
    """The provider for a project whose code host is the App's installation."""
    from codehosts.providers import provider_for

    monkeypatch.setenv(KEY_ENV, app_key()[0])
    project = project_on(
        github,
        settings,
        app_id=APP_ID,
        installation_id=installation.id,
        private_key_env=KEY_ENV,
    )
    return provider_for(project, sleep=waits.append, backoff=0)


@pytest.fixture
def hosted(github, repo, installation, settings, monkeypatch, db):
    """A project whose code host is the stand-in's App installation; jobs run in the
    foreground, and the provider neither sleeps nor waits on a rate limit itself."""
    monkeypatch.setenv(KEY_ENV, app_key()[0])
    settings.FACTORY_CODE_HOST_URLS = [github.url]
    settings.FACTORY_CODE_HOST_BACKOFF_SECONDS = 0
    settings.FACTORY_CODE_HOST_MAX_WAIT_SECONDS = 0
    settings.FACTORY_CODE_HOST_TIMEOUT_SECONDS = 3
    settings.FACTORY_EAGER_BACKGROUND_QUEUES = []
    project = ProjectFactory(
        slug="WID",
        code_host={
            "provider": "github",
            "api_url": github.url,
            "repository": REPOSITORY,
            "app_id": APP_ID,
            "installation_id": installation.id,
            "private_key_env": KEY_ENV,
            "webhook_secret_env": "FACTORY_HOST_WIDGETS_HOOK",
            "issues": None,
        },
    )
    flow = Flow(project)
    flow.gates({})
    return flow


@pytest.fixture
def team_ci(repo, monkeypatch):
    return TeamCI(repo, monkeypatch)


@pytest.fixture
def target_protection():
    """The protection of the stand-in's ``main`` where ``through`` lands (a module of
    tests overrides it: GitHub's merge queue)."""
    return STRICT


@pytest.fixture
def checks_timeout():
    """``FACTORY_LANDING_CHECKS_TIMEOUT`` where ``through`` lands: short, so that a wait
    meant to run out does so at once."""
    return 0.3


@pytest.fixture
def through(
    hosted, repo, github, settings, monkeypatch, team_ci, target_protection, checks_timeout
):
    """``hosted``'s project landing through pull requests on the stand-in's repository."""
    settings.FACTORY_LOCAL_REPOSITORY_ROOTS = [str(github.world.root)]
    settings.FACTORY_LANDING_CHECKS_TIMEOUT = checks_timeout
    settings.FACTORY_LANDING_CHECKS_POLL_SECONDS = 0.02
    settings.FACTORY_LANDING_BACKOFF_SECONDS = 0
    monkeypatch.setenv("FACTORY_HOST_WIDGETS_HOOK", "hook secret")
    monkeypatch.setattr("landing.verifying.verify_tree", Script(Origin))
    repo.protect("main", target_protection)
    project = hosted.project
    verified_by_the_runner(hosted, repo)
    project_services.project_update(
        project=project, actor=hosted.manager, landing={"mode": "pull_request"}
    )
    hosted.gates({})  # submissions straight to review: the lander's verification counts
    project.refresh_from_db()
    return hosted
