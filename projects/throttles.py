"""Who is calling from where, and the limits counted per caller (ADR 0006).

``client_address`` is the one answer to "which address sent this request": the API's
rate limits, the count of refused authentications (API and MCP) and the login lockout
(django-axes, ``AXES_CLIENT_IP_CALLABLE``) all use it, so a forged header cannot put a
caller in a fresh bucket for one of them while another still counts it.
"""

import ipaddress
import math

from django.conf import settings
from rest_framework.throttling import AnonRateThrottle, SimpleRateThrottle, UserRateThrottle


def client_address(request) -> str:
    """The client's address: ``REMOTE_ADDR``, unless ``FACTORY_TRUSTED_PROXIES`` = N > 0.

    Behind N proxies, each appending to ``X-Forwarded-For``, the client is the N-th entry
    from the right: entries further left are whatever the client wrote itself. A header
    with fewer entries than that, or an entry that is not an IP address, is not believed
    and ``REMOTE_ADDR`` answers.
    """
    remote = request.META.get("REMOTE_ADDR", "")
    proxies = settings.FACTORY_TRUSTED_PROXIES
    if proxies < 1:
        return remote
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")
    forwarded = [entry.strip() for entry in forwarded if entry.strip()]
    if len(forwarded) < proxies:
        return remote
    try:
        return str(ipaddress.ip_address(forwarded[-proxies]))
    except ValueError:
        return remote


class AddressIdent:
    """DRF throttles key anonymous callers by ``client_address`` (DRF's own ``get_ident``
    believes any ``X-Forwarded-For`` when ``NUM_PROXIES`` is unset)."""

    def get_ident(self, request):
        return client_address(request)


class AnonThrottle(AddressIdent, AnonRateThrottle):
    """Calls per anonymous address (``FACTORY_RATE_ANON``)."""


class UserThrottle(AddressIdent, UserRateThrottle):
    """Calls per user (``FACTORY_RATE_USER``)."""


class AuthFailureThrottle(AddressIdent, SimpleRateThrottle):
    """Refused bearer tokens (bad, expired, revoked) per address (``FACTORY_RATE_AUTH_FAILURES``)."""

    scope = "auth_failure"

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


def refused_authentication(request, *, credentials: bool) -> int | None:
    """Count a call refused as unauthenticated against its address.

    ``credentials``: it carried a token that did not authenticate (counted against
    ``auth_failure``); else it carried none (counted against ``anon``, which
    DRF's permission check would otherwise answer before any throttle runs).
    Returns the seconds to wait when the address is over its limit, else None.
    """
    throttle = AuthFailureThrottle() if credentials else AnonThrottle()
    if throttle.allow_request(request, None):
        return None
    return max(1, math.ceil(throttle.wait() or 1))
