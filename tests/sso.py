"""The site with single sign-on configured, for tests: its URLs (``ROOT_URLCONF``) and
``configure(settings, provider)``, which takes what factory_site/settings.py makes of the
FACTORY_OIDC_* environment, so the tests run the site as an operator would configure it."""

from factory_site.urls import handler404, handler500  # noqa: F401
from factory_site.urls import urlpatterns as site
from projects.urls import sso_patterns
from tests.test_settings import load_settings

urlpatterns = [*site, *sso_patterns]

ROLE_MAP = '{"factory-managers": {"project": "FM", "role": "manager"}}'


def environment(provider: str, **more) -> dict:
    """The FACTORY_OIDC_* lines for django-oauth-toolkit's endpoints under ``provider``/o/."""
    return {
        "FACTORY_OIDC_CLIENT_ID": "factory",
        "FACTORY_OIDC_CLIENT_SECRET": "factory-secret",
        "FACTORY_OIDC_AUTHORIZATION_ENDPOINT": f"{provider}/o/authorize/",
        "FACTORY_OIDC_TOKEN_ENDPOINT": f"{provider}/o/token/",
        "FACTORY_OIDC_USERINFO_ENDPOINT": f"{provider}/o/userinfo/",
        "FACTORY_OIDC_JWKS_ENDPOINT": f"{provider}/o/.well-known/jwks.json",
        "FACTORY_OIDC_PROVIDER_NAME": "Test IdP",
        "FACTORY_OIDC_ROLE_MAP": ROLE_MAP,
        **more,
    }


def configure(settings, provider: str, **more) -> None:
    """Single sign-on against ``provider``; ``more`` adds or overrides environment lines."""
    made = load_settings(DEBUG="1", **environment(provider, **more))
    for name, value in made.items():
        if name.startswith(("OIDC_", "FACTORY_OIDC_")) or name in {
            "FACTORY_PASSWORD_LOGIN",
            "LOGIN_REDIRECT_URL_FAILURE",
            "AUTHENTICATION_BACKENDS",
        }:
            setattr(settings, name, value)
    settings.ROOT_URLCONF = "tests.sso"
