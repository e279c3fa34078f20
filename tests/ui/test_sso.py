"""Single sign-on end to end in Chromium: a real OpenID Connect provider (django-oauth-toolkit,
tests/oidc_provider/) runs in a second process on loopback; nothing of the flow is mocked."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from playwright.sync_api import expect

from projects.models import Identity, Membership
from tests.factories import ProjectFactory, UserFactory
from tests.oidc_provider.serve import PASSWORD
from tests.sso import configure
from tests.ui.conftest import pytestmark as needs_chromium

pytestmark = [needs_chromium, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def provider(request, tmp_path_factory):
    """The provider's address; one process for the module, its client redirecting to the
    live server's callback."""
    database = tmp_path_factory.mktemp("provider") / "provider.sqlite3"
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.oidc_provider.serve"],
        cwd=ROOT,
        env={**os.environ, "PROVIDER_DATABASE": str(database)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        # Asked for only now, so the provider starts while the test database is made.
        live_server = request.getfixturevalue("live_server")
        process.stdin.write(f"{live_server.url}/oidc/callback/\n")
        process.stdin.close()
        port = process.stdout.readline().strip()  # printed once it serves
        assert port.isdigit(), f"the provider did not start (exit {process.poll()})"
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(10)


def sign_in(page, live_server, username):
    page.context.clear_cookies()
    page.goto(f"{live_server.url}/login/")
    page.click("#sso")
    expect(page.locator("h1")).to_have_text("Test IdP")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")


def roles(user) -> list[tuple[str, str]]:
    return list(Membership.objects.filter(user=user).values_list("project__slug", "role"))


def test_a_mapped_group_signs_in_as_manager_and_an_unmapped_one_with_no_role(
    page, live_server, provider, settings, shoot
):
    configure(settings, provider, FACTORY_OIDC_ISSUER=f"{provider}/o")
    ProjectFactory(slug="FM")
    UserFactory(username="nora")  # a local account the provider's "nora" must not become

    page.goto(f"{live_server.url}/login/")
    expect(page.locator("#sso")).to_have_text("Sign in with Test IdP")
    expect(page.locator("#id_password")).to_be_visible()
    shoot(page, "login-with-sso")
    sign_in(page, live_server, "nora")
    expect(page.locator(".topbar-wide .who span")).to_have_text("nora-2 · manager")
    sign_in(page, live_server, "gus")
    expect(page.locator(".topbar-wide .who span")).to_have_text("gus")

    nora, gus = (Identity.objects.get(user__username=name).user for name in ("nora-2", "gus"))
    assert (roles(nora), roles(gus)) == ([("FM", "manager")], [])
    assert (nora.email, nora.has_usable_password()) == ("nora@example.test", False)
    assert Identity.objects.filter(user__username="nora").exists() is False


def test_with_passwords_off_the_login_page_is_the_provider_button_alone(
    page, live_server, provider, settings
):
    configure(settings, provider, FACTORY_PASSWORD_LOGIN="0")
    ProjectFactory(slug="FM")

    page.goto(f"{live_server.url}/login/")
    expect(page.locator("#id_password")).to_have_count(0)
    expect(page.locator("#sso")).to_have_text("Sign in with Test IdP")
    sign_in(page, live_server, "nora")
    expect(page.locator(".topbar-wide .who span")).to_have_text("nora · manager")

    assert roles(Identity.objects.get().user) == [("FM", "manager")]
