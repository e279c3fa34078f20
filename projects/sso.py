"""Single sign-on with OpenID Connect: the authentication backend (mozilla-django-oidc).

A sign-in is the authorization-code flow with PKCE and a nonce; the ID token is checked
against the provider's published keys (``OIDC_OP_JWKS_ENDPOINT``), its audience (this
client) and, when ``FACTORY_OIDC_ISSUER`` is set, its issuer. The user is found or made by
the token's ``(iss, sub)`` (``projects.services.identity_sign_in``), never by a username or
email the provider asserts, and the roles ``FACTORY_OIDC_ROLE_MAP`` names are brought in
line with the role claim at every sign-in (``projects.services.memberships_sync``).
Whatever goes wrong on the way (the provider unreachable, a bad token) is a failed sign-in,
logged, never a 500.
"""

import logging

import requests
from django.conf import settings
from django.core.exceptions import SuspiciousOperation
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from projects.claims import claim_values, granted, managed
from projects.errors import ServiceError
from projects.services import identity_sign_in, memberships_sync

logger = logging.getLogger(__name__)

REASON = "single sign-on: the identity provider's role claim"


class SignInBackend(OIDCAuthenticationBackend):
    """The site's OpenID Connect sign-in; see the module's docstring for what it guarantees."""

    def authenticate(self, request, **kwargs):
        # Only the callback view passes a nonce: a password form posted to a URL with
        # ?code=…&state=… must not start a token exchange.
        if "nonce" not in kwargs or request is None:
            return None
        try:
            return super().authenticate(request, **kwargs)
        except (requests.RequestException, SuspiciousOperation, ServiceError, ValueError) as exc:
            logger.warning("single sign-on failed: %s", exc)
            return None

    def get_user(self, user_id):
        """The session's user, unless deactivated since (the library's would return them)."""
        user = super().get_user(user_id)
        return user if user is not None and self.user_can_authenticate(user) else None

    def verify_token(self, token, **kwargs):
        """The library's check of the signature and nonce, then the audience and issuer."""
        payload = super().verify_token(token, **kwargs)
        audience = payload.get("aud")
        audiences = [audience] if isinstance(audience, str) else audience or []
        if self.OIDC_RP_CLIENT_ID not in audiences:
            raise SuspiciousOperation("the ID token was issued to another client")
        issuer = settings.FACTORY_OIDC_ISSUER
        if issuer and payload.get("iss") != issuer:
            raise SuspiciousOperation(f"the ID token's issuer is not {issuer}")
        if not isinstance(payload.get("iss"), str) or not isinstance(payload.get("sub"), str):
            raise SuspiciousOperation("the ID token names no issuer or subject")
        return payload

    def get_or_create_user(self, access_token, id_token, payload):
        """The user of the ID token's ``(iss, sub)``, with the mapped roles the claims grant."""
        userinfo = self.get_userinfo(access_token, id_token, payload)
        if userinfo.get("sub") != payload["sub"]:
            raise SuspiciousOperation("the userinfo answer is about another subject")
        claims = {**payload, **userinfo}
        name = _text(claims.get("preferred_username")) or _text(claims.get("email"))
        user = identity_sign_in(
            issuer=payload["iss"],
            subject=payload["sub"],
            username=name.split("@")[0] if "@" in name else name,
            email=_text(claims.get("email"))[:254],
        )
        if user.is_active:  # an inactive user is refused by the callback; its roles stay
            role_map = settings.FACTORY_OIDC_ROLE_MAP
            values = claim_values(claims, settings.FACTORY_OIDC_ROLE_CLAIM)
            memberships_sync(
                user=user,
                grants=granted(role_map, values),
                managed=managed(role_map),
                reason=REASON,
            )
        return user


def _text(value) -> str:
    return value.strip() if isinstance(value, str) else ""
