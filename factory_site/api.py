"""API plumbing shared by every app: one error format, pagination, schema helpers.

Every error the API gives is JSON ``{"detail": "...", "code": "..."}`` with a
stable ``code``; a validation error also has ``fields`` naming each bad field.
Service errors carry their own status and code (``tasks.errors``); Django's and
DRF's exceptions are translated here, so no view formats an error itself.
"""

import logging

from django.core.exceptions import ObjectDoesNotExist, RequestDataTooBig
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import Http404
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiResponse
from rest_framework import exceptions, serializers
from rest_framework.pagination import CursorPagination
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from tasks.errors import ServiceError

logger = logging.getLogger(__name__)

DRF_CODES = {
    exceptions.NotAuthenticated: "not_authenticated",
    exceptions.AuthenticationFailed: "authentication_failed",
    exceptions.PermissionDenied: "permission_denied",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.ParseError: "parse_error",
    exceptions.Throttled: "throttled",
}


def _error(detail: str, code: str, status_code: int, **extra) -> Response:
    return Response({"detail": detail, "code": code, **extra}, status=status_code)


def _fields(detail) -> dict:
    """DRF's nested error detail as ``{field: [messages]}``."""
    if isinstance(detail, dict):
        return {str(k): _messages(v) for k, v in detail.items()}
    return {"non_field_errors": _messages(detail)}


def _messages(value) -> list[str]:
    if isinstance(value, dict):
        return [f"{k}: {m}" for k, v in value.items() for m in _messages(v)]
    if isinstance(value, list | tuple):
        return [m for item in value for m in _messages(item)]
    return [str(value)]


def _first(fields: dict) -> str:
    for name, messages in fields.items():
        if messages:
            return messages[0] if name == "non_field_errors" else f"{name}: {messages[0]}"
    return "invalid input"


def exception_handler(exc, context):
    """Turn every exception a view raises into the one error format."""
    if isinstance(exc, ServiceError):
        return _error(exc.detail, exc.code, exc.status, **exc.extra)
    if isinstance(exc, DjangoValidationError):
        fields = (
            exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        )
        return _error(_first(fields), "invalid", 400, fields=fields)
    if isinstance(exc, exceptions.ValidationError):
        fields = _fields(exc.detail)
        return _error(_first(fields), "invalid", 400, fields=fields)
    if isinstance(exc, RequestDataTooBig):
        return _error("the request body is larger than the server accepts", "too_large", 413)
    if isinstance(exc, Http404 | ObjectDoesNotExist):
        return _error("not found, or not in one of your projects", "not_found", 404)
    if isinstance(exc, DjangoPermissionDenied):
        return _error(str(exc) or "you may not do this", "permission_denied", 403)
    if isinstance(exc, OperationalError | InterfaceError):
        # The database is unreachable (restarting, failing over): the request changed nothing.
        logger.warning("database unavailable: %s", exc)
        response = _error("the database is unavailable; retry shortly", "unavailable", 503)
        response["Retry-After"] = "5"
        return response
    if isinstance(exc, DatabaseError):
        return None
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    code = next((c for cls, c in DRF_CODES.items() if isinstance(exc, cls)), None)
    if code is None:
        code = exc.default_code if isinstance(exc, exceptions.APIException) else "error"
    detail = exc.detail if isinstance(exc, exceptions.APIException) else str(exc)
    response.data = {"detail": str(detail), "code": code}
    if isinstance(exc, exceptions.Throttled) and exc.wait is not None:
        response.data["retry_after"] = int(exc.wait) + 1
    return response


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "factory_site.auth.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A token from `manage.py issue_token USERNAME`: `Authorization: Bearer fm_…`.",
        }


class FactoryAutoSchema(AutoSchema):
    """Names a view's nested ``InputSerializer`` after its view (``TaskClaimApi`` → ``TaskClaimInput``)."""

    def get_serializer_name(self, serializer, direction):
        parts = type(serializer).__qualname__.split(".")
        if len(parts) > 1:
            return parts[-2].removesuffix("Api") + parts[-1].removesuffix("Serializer")
        return super().get_serializer_name(serializer, direction)


class IdCursorPagination(CursorPagination):
    """Stable cursor pages: new rows never shift a page an agent is reading."""

    ordering = "id"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200


class NewestFirstPagination(IdCursorPagination):
    ordering = "-id"


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField(help_text="What went wrong, for a person.")
    code = serializers.CharField(help_text="Stable machine-readable code, e.g. lease_lost.")
    fields = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        required=False,
        help_text="For validation errors: the messages for each field.",
    )


ERROR_DESCRIPTIONS = {
    400: "Invalid input (code invalid, with fields) or an unreadable file.",
    401: "No valid bearer token (not_authenticated, authentication_failed).",
    403: "Your role does not allow this (permission_denied, not_lease_holder, own_work).",
    404: "Not found, or not in one of your projects (not_found).",
    409: "The current state does not allow this (invalid_state, lease_lost, …).",
    413: "The body or file is larger than the limit (too_large).",
    429: "Too many requests (throttled); retry after the Retry-After header.",
    503: "The database is unavailable (unavailable); retry after the Retry-After header.",
}


def errors(*statuses: int) -> dict:
    """Schema entries for the error responses an endpoint gives (401 and 503 always)."""
    wanted = sorted({401, 429, 503, *statuses})
    return {
        code: OpenApiResponse(ErrorSerializer, description=ERROR_DESCRIPTIONS[code])
        for code in wanted
    }
