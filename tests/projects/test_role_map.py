"""What an identity provider's role claim can grant, tried as someone who controls some of
it would: only a value equal to a map key grants, and only what the map says, and a role
the provider gave is taken back when nothing grants it any more (ADR 0018, ADR 0022).

Every test signs in through the real backend (``SignInBackend.get_or_create_user``) with
the ID token's claims and the userinfo answer given, as the callback would hand them over."""

import pytest

from projects.models import Membership
from projects.sso import SignInBackend
from tests.factories import ProjectFactory
from tests.sso import configure

pytestmark = pytest.mark.django_db
CLOSED = "http://127.0.0.1:9"
ISSUER = "https://idp.example.test/realms/factory"
MANAGERS = '{"/factory-managers": {"project": "FM", "role": "manager"}}'


class Provider(SignInBackend):
    """The backend with the userinfo answer given, not fetched."""

    userinfo: dict = {}

    def get_userinfo(self, access_token, id_token, payload):
        return self.userinfo


def sign_in(subject="nora", id_token=None, **userinfo):
    """One sign-in of ``subject``: ``id_token`` claims beside (iss, sub), and the answer."""
    provider = Provider()
    provider.userinfo = {"sub": subject, "preferred_username": subject, **userinfo}
    return provider.get_or_create_user(
        "at", "it", {"iss": ISSUER, "sub": subject, **(id_token or {})}
    )


def roles(user) -> set[tuple[str, str]]:
    return set(Membership.objects.filter(user=user).values_list("project__slug", "role"))


@pytest.fixture
def fm(settings):
    configure(settings, CLOSED, FACTORY_OIDC_ROLE_MAP=MANAGERS)
    return ProjectFactory(slug="FM")


@pytest.mark.parametrize(
    "value",
    [
        "/Factory-Managers",  # another case
        " /factory-managers",  # whitespace around it
        "/factory-managers ",
        "/factory-managers\u200b",  # a zero-width space
        "factory-managers",  # the group's name without its path: any parent's subgroup
        "/contractors/factory-managers",  # a subgroup of that name under another parent
        "/factory-managers/anything",
        "/factory-managers,/factory-devs",  # two groups in one string
        "FM",  # the project itself, or a role in it, named directly
        "FM:manager",
        "manager",
    ],
)
def test_only_a_claim_value_equal_to_a_map_key_grants_a_role(fm, value):
    user = sign_in(groups=[value])

    assert roles(user) == set()


@pytest.mark.parametrize(
    "groups",
    [
        {"/factory-managers": True},  # an object naming the group
        [["/factory-managers"]],  # a list inside the list
        [{"name": "/factory-managers"}],
        1,
        None,
    ],
)
def test_a_claim_that_is_not_strings_grants_nothing_and_takes_back_what_it_gave(fm, groups):
    user = sign_in(groups=["/factory-managers"])
    held_before = roles(user)

    again = sign_in(groups=groups)

    assert again == user
    assert (held_before, roles(user)) == ({("FM", "manager")}, set())


def test_a_claim_left_out_takes_back_what_it_gave(fm):
    user = sign_in(groups=["/factory-managers"])
    held_before = roles(user)

    sign_in()

    assert (held_before, roles(user)) == ({("FM", "manager")}, set())


def test_the_userinfo_answers_claim_decides_over_the_id_tokens(fm):
    token_only = sign_in("ana", id_token={"groups": ["/factory-managers"]})
    withdrawn = sign_in("bo", id_token={"groups": ["/factory-managers"]}, groups=[])
    granted = sign_in("cy", id_token={"groups": []}, groups=["/factory-managers"])

    assert (roles(token_only), roles(withdrawn), roles(granted)) == (
        {("FM", "manager")},  # the answer says nothing of groups: the signed token's stand
        set(),  # the answer is the provider's word now: the group was left since
        {("FM", "manager")},
    )


def test_a_grant_to_a_project_made_after_a_sign_in_applies_at_the_next_one(settings):
    configure(settings, CLOSED, FACTORY_OIDC_ROLE_MAP='{"/qa": {"project": "QA", "role": "agent"}}')
    user = sign_in(groups=["/qa"])  # skipped, with a warning: there is no QA yet
    held_before = roles(user)
    qa = ProjectFactory(slug="QA")

    sign_in(groups=["/qa"])

    assert held_before == set()
    assert list(Membership.objects.filter(user=user).values_list("project", "role")) == [
        (qa.pk, "agent")
    ]


def test_a_role_the_provider_gave_is_taken_back_when_the_operator_stops_mapping_it(settings, fm):
    configure(
        settings,
        CLOSED,
        FACTORY_OIDC_ROLE_MAP='{"/contractors": {"project": "FM", "role": "manager"}}',
    )
    user = sign_in(groups=["/contractors"])
    configure(  # the operator narrows the map: contractors review now, and manage nothing
        settings,
        CLOSED,
        FACTORY_OIDC_ROLE_MAP='{"/contractors": {"project": "FM", "role": "reviewer"}}',
    )

    sign_in(groups=["/contractors"])

    assert roles(user) == {("FM", "reviewer")}


def test_a_role_given_in_the_site_outside_the_map_stays_through_every_sign_in(fm):
    user = sign_in(groups=["/factory-managers"])
    Membership.objects.create(user=user, project=ProjectFactory(slug="OT"), role="agent")

    sign_in(groups=[])

    assert roles(user) == {("OT", "agent")}
