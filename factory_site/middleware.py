"""Security headers for every response: a strict Content Security Policy.

Pages load only this site's own scripts, styles and images; no inline script runs, so
hostile text that slipped into a page could not execute. Responses that set their own
policy (evidence downloads sandbox themselves) keep it.
"""

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
        return response
