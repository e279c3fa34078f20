"""The interop API: import a team's files into a project (managers), export them back (members)."""

import json

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiRequest,
    extend_schema,
    extend_schema_field,
)
from rest_framework import serializers
from rest_framework.fields import empty
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from interop import origins, services
from interop.archive import UPLOAD_MEDIA_TYPES, upload_name
from interop.formats import READERS
from interop.models import ImportRun
from projects.access import Writers
from projects.errors import NotFound
from projects.rest import KnownFieldsSerializer, NoInputSerializer, errors
from projects.roles import MANAGER, Role
from projects.selectors import visible_project
from projects.services import require_role


class ImportRunSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    project = serializers.CharField(source="project.slug")
    format = serializers.CharField()
    name = serializers.CharField()
    origin_name = serializers.CharField(
        help_text="The name its rows' origins carry: <format>:<origin_name>:<id>."
    )
    sha256 = serializers.CharField()
    size = serializers.IntegerField()
    state = serializers.ChoiceField(
        choices=["checked", "applied", "expired"],
        help_text="checked: a dry run, applied with POST …/imports/{id}/apply/; applied: written;"
        " expired: not applied within FACTORY_IMPORT_KEEP_DAYS (7) days, its upload let go.",
    )
    actor = serializers.CharField(source="actor.username")
    report = serializers.DictField(
        help_text="{format, counts {created, updated, unchanged, skipped}, items [{kind, origin,"
        " key, action, source, note?}], skipped [{source, reason}], notices [{source, message}]};"
        " source is file:line."
    )
    created_at = serializers.DateTimeField()
    applied_at = serializers.DateTimeField(allow_null=True)


@extend_schema_field({"type": "object", "additionalProperties": {}})
class MappingField(serializers.DictField):
    """A JSON object in a multipart part, as OpenAPI sends an object-typed form field: its
    JSON text (the part's content type, application/json or none, is not needed to read it)."""

    def get_value(self, dictionary):
        # DictField reads a form as mapping.key=value fields; this one is the part's JSON.
        return dictionary.get(self.field_name, empty)

    def to_internal_value(self, data):
        if isinstance(data, str):
            try:
                data = json.loads(data)
            except ValueError as exc:
                raise serializers.ValidationError(f"not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise serializers.ValidationError("a JSON object of criterion keys to proofs")
        return data


class OriginNameField(serializers.RegexField):
    """An origin name as sent: an empty part is an empty name, refused as the schema says,
    not taken for an absent one (DRF's reading of an optional form field)."""

    def get_value(self, dictionary):
        return dictionary.get(self.field_name, empty)


class ImportListApi(APIView):
    """Upload a folder (zip or tar) or a JSONL file to import; a dry run unless dry_run=false."""

    parser_classes = [MultiPartParser]
    writers = Writers(MANAGER)

    def write_target(self, request, slug):
        return visible_project(request.user, slug)

    class InputSerializer(KnownFieldsSerializer):
        read_only_from = ImportRunSerializer
        file = serializers.FileField(
            help_text="A zip or tar of the folder (gzip, bzip2 or xz compressed or not), or one"
            " .jsonl, .json, .md, .yaml or .txt file: known by its content, its name or the"
            " media type its part declares."
        )
        format = serializers.ChoiceField(choices=list(READERS))
        dry_run = serializers.BooleanField(
            default=True, help_text="true (default): report only; false: apply at once."
        )
        mapping = MappingField(
            required=False,
            help_text='spec-kit: JSON of criterion proofs, {"FR-001": {"check": "tests",'
            ' "select": "tests/test_x.py::*"}} (per feature: {"001-x": {…}}).',
        )
        origin_name = OriginNameField(
            origins.ORIGIN_NAME_PATTERN,
            max_length=origins.ORIGIN_NAME_MAX,
            required=False,
            error_messages={"invalid": origins.ORIGIN_NAME_RULE},
            help_text="The name that tells this upload's records from another's (two"
            " repositories' docs/decisions/0013): origins are <format>:<origin_name>:<id>."
            f" {origins.ORIGIN_NAME_RULE}. Default: the file's name less its extension"
            " (service-a.zip: service-a), so the same archive again matches what it imported.",
        )

    @extend_schema(
        request={
            "multipart/form-data": OpenApiRequest(
                InputSerializer, encoding={"file": {"contentType": ", ".join(UPLOAD_MEDIA_TYPES)}}
            )
        },
        responses={
            200: ImportRunSerializer,
            201: ImportRunSerializer,
            **errors(400, 403, 404, 413),
        },
    )
    def post(self, request, slug):
        project = self.target
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        upload = data.validated_data["file"]
        run = services.import_upload(
            project=project,
            actor=request.user,
            format=data.validated_data["format"],
            name=upload_name(upload.name or "upload", upload.content_type or ""),
            data=services.upload_bytes(upload),
            dry_run=data.validated_data["dry_run"],
            mapping=data.validated_data.get("mapping"),
            origin_name=data.validated_data.get("origin_name"),
        )
        return Response(
            ImportRunSerializer(run).data, status=200 if run.state == "checked" else 201
        )


def _run(request, slug, run_id) -> ImportRun:
    """A run of a project the caller manages: 404 outside the caller's projects, 403 for a
    member with another role (a report lists the project's files and items)."""
    project = visible_project(request.user, slug)
    require_role(request.user, project.pk, Role.MANAGER)
    return _run_in(project, run_id)


def _run_in(project, run_id) -> ImportRun:
    run = (
        ImportRun.objects.select_related("project", "actor")
        .filter(project=project, pk=run_id)
        .first()
    )
    if run is None:
        raise NotFound(f"no import #{run_id} in {project.slug}")
    return run


class ImportDetailApi(APIView):
    """An import with its report."""

    @extend_schema(responses={200: ImportRunSerializer, **errors(403, 404)})
    def get(self, request, slug, run_id):
        return Response(ImportRunSerializer(_run(request, slug, run_id)).data)


class ImportApplyApi(APIView):
    """Apply a checked import: the same upload, written now, all of it or nothing (managers)."""

    writers = Writers(MANAGER)

    def write_target(self, request, slug, run_id):
        return visible_project(request.user, slug)

    @extend_schema(
        request=NoInputSerializer,
        responses={200: ImportRunSerializer, **errors(400, 403, 404, 409)},
    )
    def post(self, request, slug, run_id):
        run = _run_in(self.target, run_id)
        NoInputSerializer(data=request.data).is_valid(raise_exception=True)
        run = services.import_apply(run=run, actor=request.user)
        return Response(ImportRunSerializer(run).data)


class ExportApi(APIView):
    """A project's decisions as a MADR 4 folder (zip), its tasks as beads JSONL, or a spec as a
    spec-kit spec.md (``?spec=FM-S1``)."""

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "export_format",
                OpenApiTypes.STR,
                OpenApiParameter.PATH,
                enum=list(services.EXPORTS),
                description="madr (zip), beads (JSONL) or speckit (spec.md; needs ?spec=).",
            ),
            OpenApiParameter("spec", OpenApiTypes.STR, description="speckit: the spec's key."),
        ],
        responses={
            (200, "application/zip"): OpenApiTypes.BINARY,
            (200, "application/x-ndjson"): OpenApiTypes.BINARY,
            (200, "text/markdown"): OpenApiTypes.STR,
            **errors(400, 403, 404),
        },
    )
    def get(self, request, slug, export_format):
        # Not named `format`: DRF takes a `format` URL argument for a renderer's suffix.
        project = visible_project(request.user, slug)
        name, media_type, data = services.export(
            project=project,
            actor=request.user,
            format=export_format,
            spec_key=request.query_params.get("spec"),
        )
        response = HttpResponse(data, content_type=media_type)
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response
