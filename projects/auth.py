"""API authentication. Kept apart from projects.rest: DRF imports it while loading settings."""

import binascii
from hmac import compare_digest

from django.db.models import Aggregate, CharField, OuterRef, Subquery, Value
from django.db.models.functions import Cast, Concat
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from knox.auth import TokenAuthentication
from knox.crypto import hash_token
from knox.models import get_token_model
from knox.settings import CONSTANTS, knox_settings
from rest_framework import exceptions

from projects.models import Membership


class _Joined(Aggregate):
    """Strings joined with commas: ``string_agg`` on PostgreSQL, ``group_concat`` on SQLite."""

    function = "STRING_AGG"
    template = "%(function)s(%(expressions)s, ',')"
    output_field = CharField()

    def as_sqlite(self, compiler, connection, **extra):
        return super().as_sql(compiler, connection, function="GROUP_CONCAT", **extra)


def _roles_of_the_tokens_user():
    """The token's user's memberships as one string, ``"3:FM:agent,3:FM:reviewer"``
    (project id, its slug, the role: slugs are capitals and digits, roles words)."""
    triples = Concat(
        Cast("project_id", CharField()), Value(":"), "project__slug", Value(":"), "role"
    )
    pairs = (
        Membership.objects.filter(user=OuterRef("user_id"))
        .order_by()
        .values("user_id")
        .annotate(pairs=_Joined(triples))
        .values("pairs")
    )
    return Subquery(pairs, output_field=CharField())


class BearerTokenAuthentication(TokenAuthentication):
    """Knox bearer tokens (stored hashed, expiring), checked with one query per request.

    The one query also brings the user's project roles, which every API call needs
    (``projects.roles.roles_by_project`` then asks the database nothing). Knox also
    sweeps the user's *other* expired tokens on every request; that sweep is an extra
    query on the hottest path, so the reconciler does it instead
    (``tokens_delete_expired``). The presented token's own expiry is still enforced here.
    """

    def authenticate_credentials(self, token):
        """Knox's check (the same digests, expiry and active user), on one query."""
        token = token.decode("utf-8")
        candidates = (
            get_token_model()
            .objects.filter(token_key=token[: CONSTANTS.TOKEN_KEY_LENGTH])
            .select_related("user")
            .annotate(member_roles=_roles_of_the_tokens_user())
        )
        for auth_token in candidates:
            if self._cleanup_token(auth_token):
                continue
            try:
                digest = hash_token(token)
            except (TypeError, binascii.Error):
                raise exceptions.AuthenticationFailed(_("Invalid token.")) from None
            if compare_digest(digest, auth_token.digest):
                if knox_settings.AUTO_REFRESH and auth_token.expiry:
                    self.renew_token(auth_token)
                user, auth_token = self.validate_user(auth_token)
                user._factory_roles, user._factory_slugs = _parse_roles(auth_token.member_roles)
                return user, auth_token
        raise exceptions.AuthenticationFailed(_("Invalid token."))

    def _cleanup_token(self, auth_token) -> bool:
        if auth_token.expiry is not None and auth_token.expiry < timezone.now():
            auth_token.delete()
            return True
        return False


def _parse_roles(joined: str | None) -> tuple[dict[int, set[str]], dict[str, int]]:
    """``"3:FM:agent,3:FM:reviewer"`` as ``({3: {"agent", "reviewer"}}, {"FM": 3})``: the
    caches of ``projects.roles.roles_by_project`` and ``projects.selectors.project_for``,
    filled by the token's query."""
    roles, slugs = {}, {}
    for triple in filter(None, (joined or "").split(",")):
        project_id, slug, role = triple.split(":", 2)
        roles.setdefault(int(project_id), set()).add(role)
        slugs[slug] = int(project_id)
    return roles, slugs
