"""The one application error type that services raise.

Input that is wrong in shape raises Django's ``ValidationError`` (a 400 naming the
fields); everything else a service refuses raises a ``ServiceError`` carrying a
stable ``code`` that clients branch on, a reason a person can read, and the HTTP
status the API answers with. The API's exception handler and the UI's forms turn
both into answers; no view repeats a service's checks.
"""


class ServiceError(Exception):
    status = 400
    default_code = "invalid"

    def __init__(self, detail: str, *, code: str | None = None, extra: dict | None = None):
        super().__init__(detail)
        self.detail = detail
        self.code = code or self.default_code
        self.extra = extra or {}


class PermissionDenied(ServiceError):
    """The actor's role or relation to the object does not allow this (403)."""

    status = 403
    default_code = "permission_denied"


class NotFound(ServiceError):
    """The object does not exist or is outside the actor's projects (404)."""

    status = 404
    default_code = "not_found"


class Conflict(ServiceError):
    """The object's current state does not allow this (409); retrying the same call won't help."""

    status = 409
    default_code = "conflict"


class TooLarge(ServiceError):
    """The body or file is larger than the configured limit (413)."""

    status = 413
    default_code = "too_large"


def refusal_text(exc: Exception) -> str:
    """A refusal (``ServiceError`` or Django's ``ValidationError``) as one line for a person:
    what the pages, the admin and the tools show."""
    messages = getattr(exc, "messages", None)
    if messages is not None:
        return "; ".join(messages)
    return getattr(exc, "detail", None) or str(exc)
