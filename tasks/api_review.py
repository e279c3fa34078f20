"""The reviewer's contract: the verdict on a task in review (``/api/v1/tasks/{key}/review/``)
and comments on lines of an attempt's diff (``/api/v1/attempts/{id}/comments/``).

Views validate input at the edge and call one service (``tasks.review``,
``tasks.comments``); services own permissions, locks and state.
"""

from django.conf import settings
from django.db import transaction
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from projects.access import Writers
from projects.rest import (
    NON_BLANK_TEXT,
    TEXT,
    JSONInputSerializer,
    NoInputSerializer,
    errors,
)
from projects.roles import REVIEWER_NOT_HOLDER
from tasks import review, selectors
from tasks.api import TaskSerializer, reason_schema
from tasks.api_attempts import AttemptWriteApi
from tasks.comments import RESOLVER, comment_add, comment_resolve


class LineCommentSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    attempt = serializers.IntegerField(source="attempt_id")
    author = serializers.CharField(source="author.username")
    path = serializers.CharField()
    side = serializers.ChoiceField(choices=["new", "old"])
    line = serializers.IntegerField()
    end_line = serializers.IntegerField()
    body = serializers.CharField()
    created_at = serializers.DateTimeField()
    resolved = serializers.SerializerMethodField()
    resolved_reason = serializers.CharField()

    def get_resolved(self, comment) -> bool:
        return comment.resolved_at is not None


class CommentInputSerializer(JSONInputSerializer):
    read_only_from = LineCommentSerializer
    path = serializers.CharField(max_length=1000, help_text="A file the attempt's diff changes.")
    line = serializers.IntegerField(min_value=1, max_value=10_000_000)
    end_line = serializers.IntegerField(
        min_value=1,
        max_value=10_000_000,
        required=False,
        help_text="The last line; `line` if absent (one before `line`: the same lines).",
    )
    side = serializers.ChoiceField(
        choices=["new", "old"], required=False, help_text="new (default): the changed file's lines."
    )
    body = serializers.CharField(
        max_length=settings.FACTORY_COMMENT_MAX_CHARS, help_text="Shown as text, escaped."
    )


class CriterionMarkInputSerializer(JSONInputSerializer):
    key = serializers.CharField(max_length=32, help_text="A criterion of the pinned version.")
    verdict = serializers.ChoiceField(
        choices=["met", "not_met", "na"], help_text="na: not applicable to this task."
    )
    note = serializers.CharField(
        max_length=settings.FACTORY_COMMENT_MAX_CHARS,
        required=False,
        allow_blank=True,
        default="",
        help_text="Why; needed to overrule what the evidence and gates show.",
    )


CRITERIA_SCHEMA = {
    "type": "array",
    "description": "The reviewer's verdict on criteria of the pinned spec version. Approval"
    " needs each criterion judged in review (proof `review`) marked, and every criterion met"
    " or na; a criterion proven by tests or evidence keeps that verdict unless overruled"
    " with a note.",
    "items": {
        "type": "object",
        "properties": {
            "key": {"type": "string", "maxLength": 32, "pattern": NON_BLANK_TEXT},
            "verdict": {"type": "string", "enum": ["met", "not_met", "na"]},
            "note": {
                "type": "string",
                "maxLength": settings.FACTORY_COMMENT_MAX_CHARS,
                "pattern": TEXT,
            },
        },
        "required": ["key", "verdict"],
        "additionalProperties": False,
    },
}
COMMENTS_SCHEMA = {
    "type": "array",
    "description": "Comments on lines of the attempt's diff, written with the verdict"
    " (see POST /api/v1/attempts/{id}/comments/).",
    "items": {"$ref": "#/components/schemas/CommentInputRequest"},
}
# The service asks for a reason only when rejecting or blocking (after checking who may do
# it, so a refusal for role or state comes first); one object per case says so exactly.
REVIEW_REQUEST = {
    "oneOf": [
        {
            "type": "object",
            "properties": {
                "verdict": {"type": "string", "enum": ["approve"]},
                "reason": reason_schema(TEXT, "Optional note for the record."),
                "criteria": CRITERIA_SCHEMA,
                "comments": COMMENTS_SCHEMA,
            },
            "required": ["verdict"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {
                "verdict": {"type": "string", "enum": ["reject"]},
                "reason": reason_schema(
                    NON_BLANK_TEXT,
                    "What the next attempt must do differently; may be left out when a"
                    " criterion is marked not_met.",
                ),
                "criteria": CRITERIA_SCHEMA,
                "comments": COMMENTS_SCHEMA,
            },
            "required": ["verdict"],
            "additionalProperties": False,
        },
    ]
}


class TaskReviewApi(APIView):
    """Approve or reject a task in review. Reviewers who did not submit the attempt."""

    writers = Writers(REVIEWER_NOT_HOLDER)

    def write_target(self, request, key):
        return selectors.task_for(request.user, key)

    class InputSerializer(JSONInputSerializer):
        verdict = serializers.ChoiceField(choices=["approve", "reject"])
        reason = serializers.CharField(
            max_length=10_000, required=False, allow_blank=True, default=""
        )
        criteria = CriterionMarkInputSerializer(many=True, required=False, default=list)
        comments = CommentInputSerializer(many=True, required=False, default=list)

    @extend_schema(
        request={"application/json": REVIEW_REQUEST},
        responses={200: TaskSerializer, **errors(400, 403, 404, 409)},
    )
    def post(self, request, key):
        task = self.target
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        # The answer is read in the same transaction as the verdict: if the database goes
        # away before the answer is built, the verdict is rolled back too, so the 503 the
        # caller gets is true ("nothing changed; retry") and its retry is not a 409.
        with transaction.atomic():
            task = review.task_review(task=task, actor=request.user, **data.validated_data)
            answer = TaskSerializer(task).data
        return Response(answer)


class AttemptCommentsApi(AttemptWriteApi):
    """Comments on lines of the attempt's diff: members read them; a reviewer who did not
    submit the attempt writes them while it waits for review."""

    writers = Writers(REVIEWER_NOT_HOLDER)

    @extend_schema(responses={200: LineCommentSerializer(many=True), **errors(404)})
    def get(self, request, attempt_id):
        attempt = selectors.attempt_for(request.user, attempt_id)
        rows = attempt.comments.select_related("author").order_by("path", "line", "pk")
        return Response(LineCommentSerializer(rows, many=True).data)

    @extend_schema(
        request=CommentInputSerializer,
        responses={201: LineCommentSerializer, **errors(400, 403, 404, 409)},
    )
    def post(self, request, attempt_id):
        attempt = self.target
        data = CommentInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        comment = comment_add(attempt=attempt, actor=request.user, **data.validated_data)
        return Response(LineCommentSerializer(comment).data, status=201)


class CommentResolveApi(AttemptWriteApi):
    """Mark a comment resolved by hand (reviewers)."""

    writers = Writers(RESOLVER)

    @extend_schema(
        request=NoInputSerializer,
        responses={200: LineCommentSerializer, **errors(400, 403, 404, 409)},
    )
    def post(self, request, attempt_id, comment_id):
        attempt = self.target
        NoInputSerializer(data=request.data).is_valid(raise_exception=True)
        comment = attempt.comments.select_related("author", "attempt__task").get(pk=comment_id)
        comment = comment_resolve(comment=comment, actor=request.user)
        return Response(LineCommentSerializer(comment).data)
