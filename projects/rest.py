"""API plumbing shared by every app: one error format, pagination, schema helpers.

Every error the API gives is JSON ``{"detail": "...", "code": "..."}`` with a
stable ``code``; a validation error also has ``fields`` naming each bad field.
Service errors carry their own status and code (``projects.errors``); Django's and
DRF's exceptions are translated here, so no view formats an error itself.
"""

import logging
from collections.abc import Mapping

from django.core.exceptions import (
    ObjectDoesNotExist,
    RequestDataTooBig,
    TooManyFieldsSent,
    TooManyFilesSent,
)
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import Http404
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiResponse, extend_schema_field
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from rest_framework import exceptions, serializers
from rest_framework.fields import empty
from rest_framework.pagination import CursorPagination
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from projects.errors import ServiceError
from projects.numbers import WHOLE_MAX, usd_pattern, usd_pattern_at_most, whole_number
from projects.throttles import refused_authentication

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
    if isinstance(exc, TooManyFieldsSent | TooManyFilesSent):
        return _error(str(exc) or "the form has too many fields or files", "parse_error", 400)
    if isinstance(exc, Http404 | ObjectDoesNotExist):
        return _error("not found, or not in one of your projects", "not_found", 404)
    if isinstance(exc, DjangoPermissionDenied):
        return _error(str(exc) or "you may not do this", "permission_denied", 403)
    if isinstance(exc, OperationalError | InterfaceError):
        # The database is unreachable (restarting, failing over): the request changed nothing.
        logger.warning("database unavailable: %s", exc)
        response = _error("the database is unavailable; retry shortly", "unavailable", 503)
        response["Retry-After"] = "5"
        response._has_been_logged = True  # the warning above; django.request would add an ERROR
        return response
    if isinstance(exc, DatabaseError):
        return None
    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        # Authentication is refused before DRF's throttles run: count the refusal here,
        # so an address that keeps trying is answered 429 instead of 401 forever.
        request = context.get("request")
        failed = isinstance(exc, exceptions.AuthenticationFailed)
        wait = request and refused_authentication(request, credentials=failed)
        if wait:
            exc = exceptions.Throttled(wait)
    if isinstance(exc, RedisConnectionError | RedisTimeoutError):
        # The rate-limit store (CACHE_URL) is unreachable. Throttles run before the view,
        # so the request changed nothing; refuse it rather than count no limit at all.
        logger.warning("rate-limit store unavailable: %s", exc)
        response = _error("the rate-limit store is unavailable; retry shortly", "unavailable", 503)
        response["Retry-After"] = "5"
        response._has_been_logged = True
        return response
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
    target_class = "projects.auth.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A token from `manage.py issue_token USERNAME`: `Authorization: Bearer fm_…`.",
        }


class FactoryAutoSchema(AutoSchema):
    """Names a view's nested ``InputSerializer`` after its view (``TaskClaimApi`` → ``TaskClaimInput``).

    Request schemas also say what DRF's text fields really accept: no NUL character
    (``ProhibitNullCharactersValidator``) and, where blank is refused, at least one
    character that is not whitespace (the value is trimmed before it is checked); and of
    a file, that it is not empty.
    """

    def get_serializer_name(self, serializer, direction):
        parts = type(serializer).__qualname__.split(".")
        if len(parts) > 1:
            return parts[-2].removesuffix("Api") + parts[-1].removesuffix("Serializer")
        return super().get_serializer_name(serializer, direction)

    def get_operation(self, *args, **kwargs):
        operation = super().get_operation(*args, **kwargs)
        if operation is None:  # excluded from the schema
            return None
        responses = operation.get("responses", {})
        if "requestBody" in operation and "400" in responses:
            # Any body over DATA_UPLOAD_MAX_MEMORY_SIZE is refused before the view runs, and
            # one whose Content-Type no parser of the view reads is refused by DRF.
            for refused in (413, 415):
                responses.setdefault(
                    str(refused), {**responses["400"], "description": ERROR_DESCRIPTIONS[refused]}
                )
            operation["responses"] = dict(sorted(responses.items()))
        return operation

    def _get_request_for_media_type(self, serializer, direction="request"):
        schema, required = super()._get_request_for_media_type(serializer, direction)
        if isinstance(serializer, dict):
            # A schema written out by hand: the body is required when {} does not satisfy it.
            branches = serializer.get("oneOf", [serializer])
            required = all(branch.get("required") for branch in branches)
        return schema, required

    def _get_filter_parameters(self):
        parameters = super()._get_filter_parameters()
        for parameter in parameters:
            schema = parameter.get("schema", {})
            if schema.get("type") == "string" and "enum" not in schema:
                schema.setdefault("pattern", TEXT)  # forms refuse NUL characters
        return parameters

    def _map_basic_serializer(self, serializer, direction):
        schema = super()._map_basic_serializer(serializer, direction)
        if direction != "request":
            for name, field in serializer.fields.items():
                if isinstance(field, serializers.URLField) and name in schema["properties"]:
                    # Django takes IRIs (https://host/ünï), which "format: uri" does not.
                    schema["properties"][name].pop("format", None)
            return schema
        for name, field in serializer.fields.items():
            if name in schema.get("properties", {}):
                _constrain_text(field, schema["properties"][name])
        if isinstance(serializer, KnownFieldsSerializer):
            schema["additionalProperties"] = False
        return schema


TEXT = r"^[^\u0000]*$"
# Python's str.strip() also strips \x1c-\x1f and \x85, which ECMA's \s leaves out.
NON_BLANK_TEXT = r"^[^\u0000]*[^\s\u0000\u001c-\u001f\u0085][^\u0000]*$"
# What Django's URLValidator surely accepts: http(s), a host of short labels, a port, a path.
HTTP_URL = (
    r"^https?://[a-z0-9](?:[a-z0-9-]{0,20}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,20}[a-z0-9])?){0,3}"
    r"\.[a-z]{2,20}(?::[0-9]{1,4})?(?:/[^\s\u0000]*)?$"
)


def _constrain_text(field, schema: dict) -> None:
    if isinstance(field, serializers.ListField) and isinstance(schema.get("items"), dict):
        _constrain_text(field.child, schema["items"])
    elif isinstance(field, serializers.FileField) and not field.allow_empty_file:
        schema.setdefault("minLength", 1)  # "The submitted file is empty."
    elif isinstance(field, serializers.URLField):
        # "format: uri" admits any RFC 3986 URI (mailto:x); Django wants a web address.
        text = schema["oneOf"][0] if "oneOf" in schema else schema
        text.pop("format", None)
        text["pattern"] = HTTP_URL
    elif (
        isinstance(field, serializers.JSONField)
        and not field.allow_null
        and not schema.get("oneOf")
    ):
        # Any JSON value but null, which DRF refuses.
        schema["anyOf"] = [{"type": t} for t in ("object", "array", "string", "number", "boolean")]
    elif (
        isinstance(field, serializers.CharField)
        and schema.get("type") == "string"
        and "pattern" not in schema
    ):
        blank_ok = field.allow_blank or not field.trim_whitespace
        schema["pattern"] = TEXT if blank_ok else NON_BLANK_TEXT


# Every input serializer derives from KnownFieldsSerializer: a body that names a field the
# call does not write is refused, 400 ``invalid`` naming each such field ("read-only field"
# when the resource shows it, ``read_only_from``; else "unknown field"), never ignored.
# (No docstrings on these classes: drf-spectacular would show them on every input schema.)
class KnownFieldsSerializer(serializers.Serializer):
    read_only_from: type[serializers.Serializer] | None = None

    def problems(self, data: Mapping) -> dict[str, list[str]]:
        """Each name in ``data`` this serializer does not write, with why it is refused."""
        refused = set(data) - {name for name, f in self.fields.items() if not f.read_only}
        if not refused:
            return {}
        shown = set(self.read_only_from().fields) if self.read_only_from else set()
        shown |= set(self.fields)
        return {
            name: ["read-only field" if name in shown else "unknown field"]
            for name in sorted(refused, key=str)
        }

    def to_internal_value(self, data):
        if isinstance(data, Mapping) and (errors := self.problems(data)):
            raise serializers.ValidationError(errors)
        return super().to_internal_value(data)


def validated_by(serializer: serializers.Serializer, data) -> dict:
    """``data`` validated by ``serializer``, one built once and shared by every request,
    with the refusal ``is_valid(raise_exception=True)`` would raise. For hot paths: a
    serializer made per request deep-copies its fields before it reads a value, most of
    its cost; validating changes nothing on the serializer."""
    try:
        return serializer.run_validation(data)
    except serializers.ValidationError as exc:
        errors = exc.detail
        # ``Serializer.errors``' own answer to a body that is JSON null.
        if isinstance(errors, list) and len(errors) == 1 and errors[0].code == "null":
            errors = {"non_field_errors": [exceptions.ErrorDetail("No data provided", "null")]}
        raise serializers.ValidationError(errors) from None


# Input from a JSON body must also have the JSON types the schema promises: DRF alone takes 1
# for text and "1" or "yes" for a number or a flag.
class JSONInputSerializer(KnownFieldsSerializer):
    def problems(self, data: Mapping) -> dict[str, list[str]]:
        wrong_type = {
            name: [problem]
            for name, field in self.fields.items()
            if name in data and not field.read_only
            if (problem := _type_problem(field, data[name]))
        }
        return wrong_type | super().problems(data)


# An edit's input made of its creation's: each field is declared once, on the create
# serializer this is mixed in before. On an edit no field is required and no default is
# applied (what DRF's ``partial=True`` does when it validates; said here so the schema says
# it too); ``edit_help`` gives a field whose meaning changes on an edit the help it has there.
# (No docstring: drf-spectacular would show it on the input schema.)
class EditInputMixin:
    edit_help: dict[str, str] = {}

    def get_fields(self):
        fields = super().get_fields()
        for name, field in fields.items():
            field.required = False
            field.default = empty
            if name in self.edit_help:
                field.help_text = self.edit_help[name]
        return fields


def usd_schema(digits: int, *, at_most: int | None = None) -> dict:
    """What ``projects.numbers.usd`` takes: a string of digits or a number; with
    ``at_most``, only amounts up to that many whole dollars."""
    if at_most is None:
        string, most = usd_pattern(digits), 10**digits - 1
    else:
        string, most = usd_pattern_at_most(at_most, digits), at_most
    return {
        "oneOf": [
            {"type": "string", "pattern": string},
            {"type": "number", "minimum": 0, "maximum": most},
        ]
    }


def budget_field(digits: int) -> type:
    """A budget field for ``digits`` digits before the point: the value as sent (string,
    number or null), read by the service (``projects.numbers.clean_budget``), which names
    the field when refusing."""

    @extend_schema_field(
        {
            **usd_schema(digits),
            "nullable": True,
            "description": 'US dollars, a string of digits ("250.00") or a number; '
            "decimals past the cents are cut; null for no limit.",
        }
    )
    class BudgetField(serializers.Field):
        def __init__(self, **kwargs):
            kwargs.setdefault("allow_null", True)
            super().__init__(**kwargs)

        def to_internal_value(self, data):
            return data

        def to_representation(self, value):
            return None if value is None else str(value)

    return BudgetField


# A call that takes no body: an empty one, {} or no JSON at all; any field is refused.
class NoInputSerializer(JSONInputSerializer):
    pass


def _type_problem(field, value) -> str | None:
    """Why ``value`` does not have the JSON type of ``field``, or for text the length the
    schema promises (None: it does, or DRF decides)."""
    if value is None:
        return None  # allow_null decides
    if isinstance(field, serializers.BooleanField):
        return None if isinstance(value, bool) else "must be true or false"
    if isinstance(field, serializers.IntegerField):
        whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        return None if whole and not isinstance(value, bool) else "must be a whole number"
    if isinstance(field, serializers.CharField | serializers.ChoiceField):
        if not isinstance(value, str):
            return "must be a string"
        limit = getattr(field, "max_length", None)
        if limit is not None and len(value) > limit:
            # DRF measures the value trimmed; the schema's maxLength is of what was sent.
            return f"Ensure this field has no more than {limit} characters."
        return None
    if isinstance(field, serializers.ListField) and isinstance(value, list):
        for item in value:
            if problem := _type_problem(field.child, item):
                return problem
    return None


class IdCursorPagination(CursorPagination):
    """Stable cursor pages: new rows never shift a page an agent is reading.

    ``page_size`` is a whole number from 1 (larger ones are capped at ``max_page_size``);
    anything else is a 400 rather than silently the default. A cursor that does not
    decode is DRF's 404.
    """

    ordering = "id"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200

    def get_page_size(self, request):
        size = whole_number_param(request, self.page_size_query_param)
        return self.page_size if size is None else min(size, self.max_page_size)

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"] = {"type": "integer", "minimum": 1, "maximum": WHOLE_MAX}
        return parameters


def whole_number_param(request, name: str, *, maximum: int | None = None) -> int | None:
    """Query parameter ``name`` as a whole number from 1 (to ``maximum``, when given), or
    None when it is absent.

    Given twice, empty, signed, fractional, zero, past ``maximum`` or longer than 18
    digits, it is a 400 that names it.
    """
    values = request.query_params.getlist(name)
    if not values:
        return None
    value = whole_number(values[0], minimum=1, maximum=maximum) if len(values) == 1 else None
    if value is None:
        bound = "" if maximum is None else f" to {maximum}"
        raise serializers.ValidationError(
            {name: [f"must be a whole number from 1{bound}, given once"]}
        )
    return value


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
    413: "The body or file is larger than the limit (too_large), or the upload would pass"
    " a quota (quota_exceeded, with used, limit, scope and what).",
    415: "The body's Content-Type is not one the call reads (unsupported_media_type).",
    416: "The Range asked for starts past the end of the file (range_not_satisfiable).",
    429: "Too many requests, or too many refused tokens from this address (throttled); retry after the Retry-After header.",
    503: "The database is unavailable (unavailable); retry after the Retry-After header.",
}


def errors(*statuses: int) -> dict:
    """Schema entries for the error responses an endpoint gives (401, 429 and 503 always)."""
    wanted = sorted({401, 429, 503, *statuses})
    return {
        code: OpenApiResponse(ErrorSerializer, description=ERROR_DESCRIPTIONS[code])
        for code in wanted
    }


# --- Shared inputs ---------------------------------------------------------------------


class ReasonSerializer(JSONInputSerializer):
    reason = serializers.CharField(max_length=10_000, required=False, allow_blank=True, default="")


# Documents a call whose service refuses it without a reason; the view reads it with
# ReasonSerializer, so a refusal for role or state still comes before the missing reason.
class RequiredReasonSerializer(JSONInputSerializer):
    reason = serializers.CharField(max_length=10_000)
