"""Single sign-on (OpenID Connect): the role map, the settings that switch it on, who a
sign-in is and which roles it gets, and the login page with and without passwords.

The whole flow against a real provider is tests/ui/test_sso.py."""

import time

import jwt
import pytest
from axes.models import AccessAttempt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured, SuspiciousOperation
from django.test import Client
from django.urls import reverse

from projects.claims import claim_values, granted, managed, parse_role_map
from projects.models import Event, Identity, Membership
from projects.services import identity_sign_in, memberships_sync
from projects.sso import SignInBackend
from tests.factories import ProjectFactory, UserFactory, member
from tests.sso import configure, environment
from tests.test_settings import load_settings

User = get_user_model()
CLOSED = "http://127.0.0.1:9"  # the discard port: nothing answers there
ISSUER = "https://idp.example.test/realms/factory"


# --- The role map -------------------------------------------------------------------------


def test_a_role_map_value_grants_one_role_or_a_list():
    role_map = parse_role_map(
        '{"managers": {"project": "FM", "role": "manager"},'
        ' "devs": [{"project": "FM", "role": "reviewer"}, {"project": "OT", "role": "agent"}]}'
    )

    assert role_map == {
        "managers": [("FM", "manager")],
        "devs": [("FM", "reviewer"), ("OT", "agent")],
    }
    assert granted(role_map, {"devs", "others"}) == {("FM", "reviewer"), ("OT", "agent")}
    assert managed(role_map) == {("FM", "manager"), ("FM", "reviewer"), ("OT", "agent")}
    assert parse_role_map("  ") == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "FACTORY_OIDC_ROLE_MAP is not JSON: Expecting property name"),
        ('["FM"]', "FACTORY_OIDC_ROLE_MAP must be a JSON object"),
        ('{"g": []}', "FACTORY_OIDC_ROLE_MAP['g'] must be one grant or a non-empty list"),
        (
            '{"g": {"project": "FM", "role": "manager", "x": 1}}',
            "FACTORY_OIDC_ROLE_MAP['g']: each grant is",
        ),
        (
            '{"g": {"project": "fm", "role": "manager"}}',
            "FACTORY_OIDC_ROLE_MAP['g']: project \"fm\" is not a project's key prefix",
        ),
        (
            '{"g": {"project": "FM", "role": "superuser"}}',
            "FACTORY_OIDC_ROLE_MAP['g']: role \"superuser\" is not one of agent, verifier,",
        ),
        ('{"": {"project": "FM", "role": "agent"}}', "a claim value may not be empty"),
    ],
)
def test_a_role_map_that_cannot_be_right_is_refused_saying_where(text, message):
    with pytest.raises(ImproperlyConfigured) as refused:
        parse_role_map(text)

    assert message in str(refused.value)


def test_the_role_claim_is_a_list_of_strings_or_one_string():
    assert claim_values({"groups": ["a", "b", 3]}, "groups") == {"a", "b"}
    assert claim_values({"groups": "a"}, "groups") == {"a"}
    assert claim_values({"groups": {"a": 1}}, "groups") == set()
    assert claim_values({}, "groups") == set()


# --- The settings -------------------------------------------------------------------------


def test_without_a_client_id_sign_on_is_off_and_passwords_are_the_way_in():
    site = load_settings(DEBUG="1")

    assert site["FACTORY_OIDC_ENABLED"] is False
    assert site["FACTORY_PASSWORD_LOGIN"] is True
    assert not any(name.startswith("OIDC_") for name in site)
    assert site["AUTHENTICATION_BACKENDS"] == [
        "axes.backends.AxesStandaloneBackend",
        "django.contrib.auth.backends.ModelBackend",
    ]


def test_a_client_id_adds_the_backend_and_passwords_off_removes_the_password_backend():
    both = load_settings(DEBUG="1", **environment(CLOSED))
    sso_only = load_settings(DEBUG="1", **environment(CLOSED, FACTORY_PASSWORD_LOGIN="0"))

    assert both["AUTHENTICATION_BACKENDS"][1:] == [
        "django.contrib.auth.backends.ModelBackend",
        "projects.sso.SignInBackend",
    ]
    assert sso_only["AUTHENTICATION_BACKENDS"] == [
        "axes.backends.AxesStandaloneBackend",
        "projects.sso.SignInBackend",
    ]
    assert (both["OIDC_RP_SIGN_ALGO"], both["OIDC_USE_PKCE"]) == ("RS256", True)
    assert both["FACTORY_OIDC_ROLE_MAP"] == {"factory-managers": [("FM", "manager")]}


def test_a_client_id_without_the_endpoints_stops_the_site_naming_them():
    with pytest.raises(ImproperlyConfigured) as refused:
        load_settings(DEBUG="1", FACTORY_OIDC_CLIENT_ID="factory", FACTORY_OIDC_CLIENT_SECRET="s")

    assert str(refused.value).startswith(
        "FACTORY_OIDC_CLIENT_ID is set, so single sign-on is on, but "
        "FACTORY_OIDC_AUTHORIZATION_ENDPOINT, FACTORY_OIDC_TOKEN_ENDPOINT, "
        "FACTORY_OIDC_USERINFO_ENDPOINT, FACTORY_OIDC_JWKS_ENDPOINT not."
    )


def test_passwords_off_without_sign_on_and_a_shared_secret_algorithm_stop_the_site():
    with pytest.raises(ImproperlyConfigured, match=r"^FACTORY_PASSWORD_LOGIN=0 turns passwords"):
        load_settings(DEBUG="1", FACTORY_PASSWORD_LOGIN="0")
    with pytest.raises(
        ImproperlyConfigured, match=r"^FACTORY_OIDC_SIGN_ALGO must be an asymmetric algorithm"
    ):
        load_settings(DEBUG="1", **environment(CLOSED, FACTORY_OIDC_SIGN_ALGO="HS256"))
    with pytest.raises(ImproperlyConfigured, match=r"^FACTORY_OIDC_ROLE_MAP is not JSON"):
        load_settings(DEBUG="1", FACTORY_OIDC_ROLE_MAP="groups=FM:manager")


# --- Who signs in, with which roles -------------------------------------------------------


@pytest.mark.django_db
def test_a_first_sign_in_makes_a_user_without_password_or_role_and_the_next_finds_it():
    first = identity_sign_in(issuer=ISSUER, subject="s-1", username="nora", email="n@x.test")
    again = identity_sign_in(issuer=ISSUER, subject="s-1", username="renamed", email="")

    assert again == first
    assert (first.username, first.email, first.has_usable_password()) == (
        "nora",
        "n@x.test",
        False,
    )
    assert Membership.objects.filter(user=first).count() == 0
    assert list(Identity.objects.values_list("issuer", "subject")) == [(ISSUER, "s-1")]


@pytest.mark.django_db
def test_a_provider_asserting_a_taken_name_gets_a_new_account_not_the_existing_one():
    local = UserFactory(username="maria")
    UserFactory(username="Maria-2")

    user = identity_sign_in(issuer=ISSUER, subject="s-2", username="maria")
    other_issuer = identity_sign_in(issuer="https://other.test", subject="s-2", username="maria")
    odd = identity_sign_in(issuer=ISSUER, subject="s-3", username="a b/ç")

    assert (user.username, other_issuer.username, odd.username) == ("maria-3", "maria-4", "ab")
    assert local.identities.count() == 0
    assert User.objects.get(pk=local.pk).has_usable_password() is True


@pytest.mark.django_db
def test_the_admin_points_an_identity_at_the_password_account_it_replaces(admin_client):
    old = UserFactory(username="maria")
    identity_sign_in(issuer=ISSUER, subject="s-5", username="maria")  # made maria-2
    identity = Identity.objects.get(subject="s-5")
    url = reverse("admin:projects_identity_change", args=[identity.pk])

    response = admin_client.post(
        url, {"user": old.pk, "issuer": "https://evil.test", "subject": "other"}
    )

    assert response.status_code == 302, response.content
    assert identity_sign_in(issuer=ISSUER, subject="s-5", username="ignored") == old
    assert list(Identity.objects.values_list("issuer", "subject", "user__username")) == [
        (ISSUER, "s-5", "maria")  # the pair the provider asserts cannot be edited
    ]


@pytest.mark.django_db
def test_staff_without_the_identity_permission_cannot_repoint_an_identity(client):
    old = UserFactory(username="maria")
    identity_sign_in(issuer=ISSUER, subject="s-7", username="maria")
    identity = Identity.objects.get(subject="s-7")
    client.force_login(UserFactory(username="clerk", is_staff=True))
    url = reverse("admin:projects_identity_change", args=[identity.pk])

    seen = client.get(url)
    posted = client.post(url, {"user": old.pk})

    assert (seen.status_code, posted.status_code) == (403, 403)
    assert Identity.objects.get(pk=identity.pk).user.username == "maria-2"


@pytest.mark.django_db
def test_an_identity_added_in_the_admin_signs_in_as_its_account_at_the_first_sign_in(
    admin_client,
):
    old = UserFactory(username="ravi")

    response = admin_client.post(
        reverse("admin:projects_identity_add"),
        {"user": old.pk, "issuer": ISSUER, "subject": "s-6"},
    )
    refused = admin_client.post(
        reverse("admin:projects_identity_add"),
        {"user": UserFactory().pk, "issuer": ISSUER, "subject": "s-6"},
    )

    assert response.status_code == 302, response.content
    assert refused.status_code == 200  # the form again, with the reason
    assert "already exists" in refused.content.decode()
    assert identity_sign_in(issuer=ISSUER, subject="s-6", username="ravi") == old
    assert User.objects.filter(username__startswith="ravi").count() == 1


@pytest.mark.django_db
def test_sync_grants_what_the_map_grants_revokes_what_it_no_longer_does_and_keeps_the_rest():
    fm, ot = ProjectFactory(slug="FM"), ProjectFactory(slug="OT")
    user = member(fm, "reviewer")  # given in the site: not in the map, so it stays
    Membership.objects.create(user=user, project=ot, role="agent")
    role_map = {"m": [("FM", "manager")], "a": [("OT", "agent")], "x": [("NOPE", "agent")]}

    memberships_sync(
        user=user, grants=granted(role_map, {"m", "x"}), managed=managed(role_map), reason="sso"
    )

    held = set(Membership.objects.filter(user=user).values_list("project__slug", "role"))
    assert held == {("FM", "reviewer"), ("FM", "manager")}
    events = Event.objects.filter(reason="sso").order_by("pk")
    assert [(e.transition, e.actor_id, e.extra["role"]) for e in events] == [
        ("revoke", None, "agent"),
        ("grant", None, "manager"),
    ]


@pytest.mark.django_db
def test_a_second_sync_with_the_same_claims_writes_nothing():
    ProjectFactory(slug="FM")
    user = UserFactory()
    role_map = {"m": [("FM", "manager")]}
    memberships_sync(user=user, grants={("FM", "manager")}, managed=managed(role_map), reason="r")
    count = Event.objects.count()

    memberships_sync(user=user, grants={("FM", "manager")}, managed=managed(role_map), reason="r")

    assert Event.objects.count() == count
    assert Membership.objects.filter(user=user).count() == 1


class Backend(SignInBackend):
    """The backend with the userinfo answer given, not fetched."""

    userinfo: dict = {}

    def get_userinfo(self, access_token, id_token, payload):
        return self.userinfo


@pytest.mark.django_db
def test_the_backend_maps_the_role_claim_and_an_unmapped_user_gets_no_role(settings):
    configure(settings, CLOSED)
    fm = ProjectFactory(slug="FM")
    backend = Backend()
    payload = {"iss": ISSUER, "sub": "boss"}

    backend.userinfo = {"sub": "boss", "preferred_username": "boss", "groups": ["factory-managers"]}
    boss = backend.get_or_create_user("at", "it", payload)
    backend.userinfo = {"sub": "guest", "email": "guest@x.test", "groups": ["visitors"]}
    guest = backend.get_or_create_user("at", "it", {"iss": ISSUER, "sub": "guest"})

    assert list(Membership.objects.filter(user=boss).values_list("project", "role")) == [
        (fm.pk, "manager")
    ]
    assert (guest.username, guest.email) == ("guest", "guest@x.test")
    assert Membership.objects.filter(user=guest).count() == 0


@pytest.mark.django_db
def test_a_userinfo_answer_about_another_subject_is_refused_and_makes_no_user(settings):
    configure(settings, CLOSED)
    backend = Backend()
    backend.userinfo = {"sub": "someone-else", "preferred_username": "x"}

    with pytest.raises(SuspiciousOperation):
        backend.get_or_create_user("at", "it", {"iss": ISSUER, "sub": "me"})

    assert Identity.objects.count() == 0


def signed(key, **claims) -> str:
    body = {"iss": ISSUER, "sub": "s", "aud": "factory", "nonce": "n", "exp": time.time() + 60}
    return jwt.encode({**body, **claims}, key, algorithm="RS256")


@pytest.fixture(scope="module")
def provider_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture
def verifying(settings, provider_key):
    configure(settings, CLOSED, FACTORY_OIDC_ISSUER=ISSUER)
    settings.OIDC_RP_IDP_SIGN_KEY = provider_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return SignInBackend()


def test_an_id_token_for_this_client_from_the_issuer_is_accepted(verifying, provider_key):
    payload = verifying.verify_token(signed(provider_key), nonce="n")

    assert (payload["iss"], payload["sub"]) == (ISSUER, "s")


@pytest.mark.parametrize(
    ("claims", "message"),
    [
        ({"aud": "another-client"}, "the ID token was issued to another client"),
        ({"aud": ["a", "b"]}, "the ID token was issued to another client"),
        ({"iss": "https://evil.test"}, f"the ID token's issuer is not {ISSUER}"),
        ({"nonce": "replayed"}, "JWT Nonce verification failed."),
    ],
)
def test_an_id_token_for_another_client_issuer_or_nonce_is_refused(
    verifying, provider_key, claims, message
):
    with pytest.raises(SuspiciousOperation) as refused:
        verifying.verify_token(signed(provider_key, **claims), nonce="n")

    assert str(refused.value) == message


def test_an_id_token_signed_by_another_key_is_refused(verifying):
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    with pytest.raises(SuspiciousOperation, match=r"^JWS token verification failed\.$"):
        verifying.verify_token(signed(stranger), nonce="n")


# --- The pages ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_without_sign_on_the_login_page_has_no_button_and_no_oidc_address_resolves(client):
    page = client.get("/login/").content.decode()

    assert 'id="id_password"' in page
    assert "Sign in with" not in page
    assert client.get("/oidc/authenticate/").status_code == 404
    assert client.get("/oidc/callback/?code=c&state=s").status_code == 404


@pytest.mark.django_db
def test_with_sign_on_the_login_page_offers_the_provider_beside_the_password(client, settings):
    configure(settings, CLOSED)

    page = client.get("/login/?next=/review/").content.decode()
    start = client.get("/oidc/authenticate/?next=/review/")

    assert 'id="id_password"' in page
    assert 'href="/oidc/authenticate/?next=/review/">Sign in with Test IdP</a>' in page
    assert start.status_code == 302
    assert start["Location"].startswith(f"{CLOSED}/o/authorize/?response_type=code&scope=")
    assert "code_challenge_method=S256" in start["Location"]


@pytest.mark.django_db
def test_an_unreachable_provider_is_a_failed_sign_in_not_an_error(client, settings):
    configure(settings, CLOSED)
    start = client.get("/oidc/authenticate/")
    state = dict(p.split("=") for p in start["Location"].split("?")[1].split("&"))["state"]

    response = client.get(f"/oidc/callback/?code=abc&state={state}")
    page = client.get(response["Location"]).content.decode()

    assert (response.status_code, response["Location"]) == (302, "/login/?sso=failed")
    assert "Signing in with Test IdP did not complete." in page
    assert "_auth_user_id" not in client.session
    assert User.objects.count() == 0


@pytest.mark.django_db
def test_with_passwords_off_the_form_is_gone_and_posting_it_signs_nobody_in(client, settings):
    configure(settings, CLOSED, FACTORY_PASSWORD_LOGIN="0")
    user = UserFactory(username="old-hand")

    page = client.get("/login/").content.decode()
    posted = client.post("/login/", {"username": "old-hand", "password": "pw"})
    admin = client.post("/admin/login/", {"username": "old-hand", "password": "pw"})

    assert 'id="id_password"' not in page
    assert "Sign in with Test IdP" in page
    assert posted.status_code == 403
    assert "Passwords are turned off on this site" in posted.content.decode()
    assert admin.status_code == 200
    assert "Please enter the correct username and password" in admin.content.decode()
    assert "_auth_user_id" not in client.session
    assert User.objects.get(pk=user.pk).last_login is None
    assert AccessAttempt.objects.filter(username="old-hand").count() == 1  # the admin's try


@pytest.mark.django_db
def test_with_passwords_off_api_tokens_still_work(settings, api):
    configure(settings, CLOSED, FACTORY_PASSWORD_LOGIN="0")
    user = member(ProjectFactory(slug="FM"), "manager")

    response = api(user).get("/api/v1/projects/")

    assert response.status_code == 200
    assert [p["slug"] for p in response.json()["results"]] == ["FM"]


@pytest.mark.django_db
def test_with_sign_on_on_passwords_and_the_lockout_work_as_before(settings):
    configure(settings, CLOSED)
    UserFactory(username="worker")
    UserFactory(username="other")
    client = Client()

    statuses = [
        client.post("/login/", {"username": "worker", "password": "no"}).status_code
        for _ in range(5)
    ]
    locked = client.post("/login/", {"username": "worker", "password": "pw"})
    elsewhere = Client()
    fresh = elsewhere.post(
        "/login/", {"username": "worker", "password": "pw"}, REMOTE_ADDR="1.2.3.4"
    )
    other = elsewhere.post(
        "/login/", {"username": "other", "password": "pw"}, REMOTE_ADDR="1.2.3.4"
    )

    assert statuses == [200, 200, 200, 200, 429]
    assert locked.status_code == 429
    assert fresh.status_code == 429  # the username is locked from any address
    assert "_auth_user_id" not in client.session
    assert (other.status_code, other["Location"]) == (302, "/")
    assert elsewhere.session["_auth_user_backend"] == "django.contrib.auth.backends.ModelBackend"


@pytest.mark.django_db
def test_a_locked_address_cannot_sign_in_with_the_provider_either(client, settings):
    configure(settings, CLOSED)
    for n in range(5):
        client.post("/login/", {"username": f"guess{n}", "password": "no"})
    start = client.get("/oidc/authenticate/")
    state = dict(p.split("=") for p in start["Location"].split("?")[1].split("&"))["state"]

    response = client.get(f"/oidc/callback/?code=abc&state={state}")

    assert response.status_code == 429
    assert "Too many failed logins" in response.content.decode()
    assert "_auth_user_id" not in client.session
    assert User.objects.count() == 0


@pytest.mark.django_db
def test_a_user_deactivated_after_signing_in_is_signed_out_with_passwords_off(client, settings):
    configure(settings, CLOSED, FACTORY_PASSWORD_LOGIN="0")
    user = identity_sign_in(issuer=ISSUER, subject="s-9", username="leaver")
    client.force_login(user, backend="projects.sso.SignInBackend")
    before = client.get("/tokens/").status_code

    User.objects.filter(pk=user.pk).update(is_active=False)
    after = client.get("/tokens/")

    assert before == 200
    assert (after.status_code, after["Location"]) == (302, "/login/?next=/tokens/")
