"""Evidence in the agent contract: upload to an attempt, read metadata, stream content."""

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import ParseError
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from evidence import services
from evidence.models import Evidence, Kind
from evidence.responses import evidence_response
from evidence.uploads import HashingUploadHandler
from projects.errors import TooLarge
from projects.rest import errors
from projects.selectors import project_ids_for
from tasks import selectors


class EvidenceSerializer(serializers.ModelSerializer):
    attempt = serializers.IntegerField(source="attempt_id", read_only=True)
    criteria = serializers.SlugRelatedField(many=True, read_only=True, slug_field="key")
    authoritative = serializers.BooleanField(read_only=True)
    url = serializers.SerializerMethodField()

    class Meta:
        model = Evidence
        fields = [
            "id",
            "attempt",
            "kind",
            "name",
            "sha256",
            "size",
            "media_type",
            "provenance",
            "authoritative",
            "criteria",
            "summary",
            "created_at",
            "url",
        ]
        read_only_fields = fields

    def get_url(self, evidence) -> str:
        return f"/api/v1/evidence/{evidence.pk}/content/"


class AttemptEvidenceApi(APIView):
    """Attach a file to an attempt (the lease holder: agent evidence; a verifier: authoritative)."""

    parser_classes = [MultiPartParser]

    class InputSerializer(serializers.Serializer):
        file = serializers.FileField(help_text="The evidence file (multipart).")
        kind = serializers.ChoiceField(choices=Kind.choices)
        criteria = serializers.ListField(
            child=serializers.CharField(max_length=200),
            required=False,
            default=list,
            help_text="Criterion keys it proves; repeat the field or separate with commas.",
        )

    def initialize_request(self, request, *args, **kwargs):
        # Before anything reads the body (CSRF checks do): stream to disk, hashing as we go.
        if request.method == "POST":
            self.upload_handler = HashingUploadHandler(request)
            request.upload_handlers = [self.upload_handler]
        return super().initialize_request(request, *args, **kwargs)

    def finalize_response(self, request, response, *args, **kwargs):
        handler = getattr(self, "upload_handler", None)
        if handler is not None:
            handler.discard()  # the stored copy is separate; temporary files never linger
        return super().finalize_response(request, response, *args, **kwargs)

    @extend_schema(responses={200: EvidenceSerializer(many=True), **errors(404)})
    def get(self, request, attempt_id):
        attempt = selectors.attempt_for(request.user, attempt_id)
        rows = attempt.evidence.prefetch_related("criteria").order_by("id")
        return Response(EvidenceSerializer(rows, many=True).data)

    @extend_schema(
        request={"multipart/form-data": InputSerializer},
        responses={201: EvidenceSerializer, **errors(400, 403, 404, 409, 413)},
    )
    def post(self, request, attempt_id):
        limit = settings.FACTORY_MAX_UPLOAD_BYTES
        try:
            declared = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            raise ParseError("the Content-Length header is not a number") from None
        if declared > limit + 1024 * 1024:  # a little room for the multipart envelope
            raise TooLarge(f"the upload is {declared} bytes; the limit is {limit}")
        attempt = selectors.attempt_for(request.user, attempt_id)
        criteria = []
        for value in request.data.getlist("criteria") if hasattr(request.data, "getlist") else []:
            criteria.extend(part.strip() for part in value.split(",") if part.strip())
        if self.upload_handler.too_large:
            raise TooLarge(f"the file is larger than the limit of {limit} bytes")
        data = self.InputSerializer(
            data={
                "file": request.data.get("file"),
                "kind": request.data.get("kind"),
                "criteria": criteria,
            }
        )
        data.is_valid(raise_exception=True)
        upload = data.validated_data["file"]
        evidence = services.evidence_attach(
            attempt=attempt,
            actor=request.user,
            file=upload,
            kind=data.validated_data["kind"],
            criteria=data.validated_data["criteria"],
            name=upload.name,
            media_type=upload.content_type or "",
            sha256=getattr(upload, "sha256", None) or None,
        )
        return Response(EvidenceSerializer(evidence).data, status=status.HTTP_201_CREATED)


def evidence_for(user, evidence_id) -> Evidence:
    return Evidence.objects.filter(attempt__task__project_id__in=project_ids_for(user)).get(
        pk=evidence_id
    )


class EvidenceDetailApi(APIView):
    @extend_schema(responses={200: EvidenceSerializer, **errors(404)})
    def get(self, request, evidence_id):
        return Response(EvidenceSerializer(evidence_for(request.user, evidence_id)).data)


class EvidenceContentApi(APIView):
    """The file itself, streamed, with its SHA-256 in the ``X-Content-SHA256`` and ``ETag`` headers.

    ``Range: bytes=a-b`` (one range) answers 206 with those bytes; a range that starts
    past the end answers 416 ``range_not_satisfiable``.
    """

    @extend_schema(
        responses={
            (200, "*/*"): OpenApiResponse(
                OpenApiTypes.BINARY,
                description="The file's bytes, as the media type it was uploaded with.",
            ),
            (206, "*/*"): OpenApiResponse(
                OpenApiTypes.BINARY, description="The range asked for in the Range header."
            ),
            **errors(404, 416),
        }
    )
    def get(self, request, evidence_id):
        evidence = evidence_for(request.user, evidence_id)
        response = evidence_response(
            request, evidence, content_type=evidence.media_type, as_attachment=True
        )
        response["X-Content-SHA256"] = evidence.sha256
        return response
