"""Evidence in the agent contract: upload to an attempt, read metadata, stream content."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from evidence.models import Evidence
from evidence.responses import evidence_response
from projects.rest import errors
from projects.selectors import project_ids_for


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
