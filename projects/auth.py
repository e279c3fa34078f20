"""API authentication. Kept apart from projects.rest: DRF imports it while loading settings."""

from django.utils import timezone
from knox.auth import TokenAuthentication


class BearerTokenAuthentication(TokenAuthentication):
    """Knox bearer tokens (stored hashed, expiring), checked with one query per request.

    Knox also sweeps the user's *other* expired tokens on every request; that sweep is
    an extra query on the hottest path, so the reconciler does it instead
    (``tokens_delete_expired``). The presented token's own expiry is still enforced here.
    """

    def _cleanup_token(self, auth_token) -> bool:
        if auth_token.expiry is not None and auth_token.expiry < timezone.now():
            auth_token.delete()
            return True
        return False
