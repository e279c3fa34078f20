"""What every request passes through: its id, the probes, security headers, the database's absence.

Pages load only this site's own scripts, styles and images (a strict Content Security
Policy); no inline script runs, so hostile text that slipped into a page could not
execute. Responses that set their own policy (evidence downloads sandbox themselves) keep it.
"""

import logging

from django.http import HttpResponseNotAllowed

from factory_site import health
from projects import logs

log = logging.getLogger(__name__)

CSP = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "font-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)


class RequestIdMiddleware:
    """Each request runs under an id: the caller's ``X-Request-ID`` when it is a sane token
    (``projects.logs.sane``), else a new one. It is echoed in the response, on
    ``request.request_id``, on every log line the request writes and in every job it starts.
    First in ``MIDDLEWARE``, so that every other middleware's lines carry it too."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        given = request.headers.get("X-Request-ID")
        request.request_id = given if logs.sane(given) else logs.new_request_id()
        with logs.bound(request.request_id):
            response = self.get_response(request)
        response["X-Request-ID"] = request.request_id
        return response


class HealthMiddleware:
    """Serves ``/healthz`` and ``/readyz`` (factory_site.health) before anything reads the
    Host header, a session or a user: a load balancer probes by address, logged in as no
    one. Placed after SecurityMiddleware, whose HTTPS redirect exempts them
    (``SECURE_REDIRECT_EXEMPT``); no rate limit applies (throttles are the API's)."""

    PROBES = {"/healthz": health.healthz, "/readyz": health.readyz}

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        probe = self.PROBES.get(request.path_info)
        if probe is None:
            return self.get_response(request)
        if request.method not in ("GET", "HEAD"):
            return HttpResponseNotAllowed(["GET", "HEAD"])
        response = probe(request)
        response["Cache-Control"] = "no-store"
        return response


class SecurityHeadersMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers.setdefault("Referrer-Policy", "same-origin")
        response.headers.setdefault("Cross-Origin-Opener-Policy", "same-origin")
        return response


class DatabaseUnavailableMiddleware:
    """While the database is unreachable (restarting, failing over), answer 503 with a
    retry hint instead of a 500. The request changed nothing: its transaction never
    committed. (API views answer the same through projects.rest's handler.)"""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        from django.db import InterfaceError, OperationalError
        from django.http import HttpResponse, JsonResponse

        if not isinstance(exception, OperationalError | InterfaceError):
            return None
        log.warning("database unavailable: %s", exception)
        if request.path.startswith("/api/"):
            response = JsonResponse(
                {"detail": "the database is unavailable; retry shortly", "code": "unavailable"},
                status=503,
            )
        else:
            response = HttpResponse(
                "The database is unavailable for a moment. Reload the page shortly.",
                status=503,
                content_type="text/plain",
            )
        response["Retry-After"] = "5"
        # One warning above, not django.request's ERROR for every 503 of an outage.
        response._has_been_logged = True
        return response
