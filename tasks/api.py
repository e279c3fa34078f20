"""The agent contract for tasks and attempts (``/api/v1/``).

Views validate input at the edge and call one service; services own permissions,
locks and state. Every object is looked up through the caller's memberships, so
another project's task or attempt is a 404.
"""

from django.conf import settings
from django.db import transaction
from django.db.models import prefetch_related_objects
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import generics, serializers, status
from rest_framework.exceptions import ParseError
from rest_framework.parsers import MultiPartParser
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from decisions import api as decision_api
from decisions.models import Spec
from evidence import api as evidence_api
from evidence import services as evidence_services
from evidence.models import Kind
from evidence.selectors import measured_run
from evidence.uploads import HashingUploadHandler
from projects.errors import TooLarge
from projects.models import Event
from projects.rest import (
    NON_BLANK_TEXT,
    TEXT,
    IdCursorPagination,
    JSONInputSerializer,
    KnownFieldsSerializer,
    NoInputSerializer,
    ReasonSerializer,
    errors,
    whole_number_param,
)
from projects.selectors import project_for, visible_project
from tasks import brief, selectors, services
from tasks.filters import TaskFilter
from tasks.handoff import handoff
from tasks.models import AttemptState, Task, TaskState
from tasks.review import applied_text

# --- Output ---------------------------------------------------------------------------------


# Plain serializers, not ModelSerializers: these are on the claim path, and building
# a ModelSerializer's fields by introspection costs more than the claim's own queries.


class RelatedKeysField(serializers.ListField):
    """A to-many relation as a list of one attribute of each related row (names, keys).

    An instance that already knows the list (``instance.related_keys[field_name]``, as
    the one-statement claim loads it) is not asked again.
    """

    def __init__(self, attr: str, **kwargs):
        self.attr = attr
        super().__init__(child=serializers.CharField(), read_only=True, **kwargs)

    def get_attribute(self, instance):
        known = getattr(instance, "related_keys", {})
        if self.field_name in known:
            return list(known[self.field_name])
        return super().get_attribute(instance)

    def to_representation(self, value):
        if isinstance(value, list):
            return value
        return [getattr(obj, self.attr) for obj in value.all()]


class TaskSerializer(serializers.Serializer):
    key = serializers.CharField(read_only=True)
    project = serializers.CharField(source="project.slug", read_only=True)
    title = serializers.CharField(read_only=True)
    description = serializers.CharField(read_only=True)
    state = serializers.ChoiceField(choices=TaskState.choices, read_only=True)
    priority = serializers.IntegerField(read_only=True)
    labels = RelatedKeysField("name")
    depends_on = RelatedKeysField("key")
    allowed_paths = serializers.ListField(child=serializers.CharField(), read_only=True)
    spec = serializers.CharField(source="spec.key", read_only=True, allow_null=True)
    max_attempts = serializers.IntegerField(read_only=True)
    attempt_count = serializers.IntegerField(read_only=True)
    failed_attempts = serializers.IntegerField(read_only=True)
    current_attempt = serializers.IntegerField(
        source="current_attempt_id", read_only=True, allow_null=True
    )
    created_at = serializers.DateTimeField(read_only=True)
    updated_at = serializers.DateTimeField(read_only=True)


class SpecVersionRefSerializer(serializers.Serializer):
    spec = serializers.CharField(source="spec.key")
    number = serializers.IntegerField()


class AttemptSerializer(serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    task = serializers.CharField(source="task.key", read_only=True)
    number = serializers.IntegerField(read_only=True)
    agent = serializers.CharField(source="agent.username", read_only=True)
    state = serializers.ChoiceField(choices=AttemptState.choices, read_only=True)
    spec_version = SpecVersionRefSerializer(read_only=True, allow_null=True)
    lease_expires_at = serializers.DateTimeField(read_only=True, allow_null=True)
    heartbeat_at = serializers.DateTimeField(read_only=True, allow_null=True)
    checkpoint_revision = serializers.IntegerField(read_only=True)
    context_sha256 = serializers.CharField(read_only=True)
    context_fetched_at = serializers.DateTimeField(read_only=True, allow_null=True)
    summary = serializers.CharField(read_only=True)
    change = serializers.JSONField(read_only=True)
    submitted_at = serializers.DateTimeField(read_only=True, allow_null=True)
    ended_at = serializers.DateTimeField(read_only=True, allow_null=True)
    end_reason = serializers.CharField(read_only=True)
    started_at = serializers.DateTimeField(read_only=True)


class GateRunSerializer(serializers.Serializer):
    gate = serializers.CharField()
    state = serializers.CharField()
    summary = serializers.CharField()
    verdict = serializers.JSONField()
    report = serializers.IntegerField(
        source="report_id", allow_null=True, help_text="Evidence id of the gate's report."
    )
    tries = serializers.IntegerField()
    queued_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)


def runner_status(attempt) -> dict | None:
    """``{state, verified, commit, seconds, summary, tests}`` of the attempt's runner, or None."""
    run, measured = measured_run(attempt)
    if run is None:
        return None
    fields = ("state", "verified", "commit", "seconds", "summary", "tests")
    answer = {name: measured[name] for name in fields}
    answer["commit"] = measured["commit"] or (attempt.change or {}).get("commit")
    return answer


class ReviewSerializer(serializers.Serializer):
    verdict = serializers.ChoiceField(choices=["approve", "reject"])
    by = serializers.CharField(allow_null=True)
    reason = serializers.CharField()
    applied = serializers.DictField(
        allow_null=True,
        help_text="What was in force when the reviewer decided: spec {key, version,"
        " current_version}, decisions [{key, title}], gate_policy, gates [{gate, state,"
        " summary}], commit, runner {state, commit}, at. Later versions do not change it.",
    )
    applied_text = serializers.CharField(help_text='e.g. "FM-S1 v2, decisions FM-D3, gates …"')
    criteria = serializers.ListField(
        child=serializers.DictField(),
        help_text="Each criterion of the pinned version: {key, check, verdict (met, not_met,"
        " na or null when unmarked), note, by (reviewer, or evidence when the reviewer kept"
        " what the evidence and gates showed), gate (what they showed)}.",
    )


class RunnerSerializer(serializers.Serializer):
    state = serializers.CharField(help_text="The runner gate run's state.")
    verified = serializers.BooleanField(help_text="Whether it measured anything at the commit.")
    commit = serializers.CharField(allow_null=True)
    seconds = serializers.FloatField(allow_null=True)
    summary = serializers.CharField()
    tests = serializers.DictField(help_text="The runner's JUnit totals, and its failing tests.")


class AttemptDetailSerializer(AttemptSerializer):
    gate_runs = GateRunSerializer(many=True, read_only=True)
    runner = serializers.SerializerMethodField()
    review = serializers.SerializerMethodField()

    @extend_schema_field(RunnerSerializer(allow_null=True))
    def get_runner(self, attempt) -> dict | None:
        return runner_status(attempt)

    @extend_schema_field(ReviewSerializer(allow_null=True))
    def get_review(self, attempt) -> dict | None:
        if attempt.state not in ("approved", "rejected"):
            return None
        return {
            "verdict": "approve" if attempt.state == "approved" else "reject",
            "by": attempt.reviewed_by.username if attempt.reviewed_by_id else None,
            "reason": attempt.end_reason,
            "applied": attempt.applied,
            "applied_text": applied_text(attempt.applied),
            "criteria": attempt.criteria_verdicts,
        }


class EventSerializer(serializers.ModelSerializer):
    actor = serializers.SerializerMethodField()
    object = serializers.CharField(source="object_key")

    class Meta:
        model = Event
        fields = [
            "id",
            "created_at",
            "object",
            "transition",
            "from_state",
            "to_state",
            "actor",
            "reason",
            "extra",
        ]
        read_only_fields = fields

    def get_actor(self, event) -> str:
        return event.actor_label


# --- Input helpers ------------------------------------------------------------------------


class ChangeSerializer(JSONInputSerializer):
    commit = serializers.RegexField(
        r"^[0-9a-fA-F]{7,64}$", required=False, help_text="Commit hash."
    )
    branch = serializers.CharField(max_length=255, required=False)
    url = serializers.URLField(max_length=2000, required=False)


@extend_schema_field(
    {
        "type": "integer",
        "minimum": settings.FACTORY_LEASE_SECONDS_MIN,
        "maximum": settings.FACTORY_LEASE_SECONDS_MAX,
        "description": f"Seconds; defaults to {settings.FACTORY_LEASE_SECONDS_DEFAULT}.",
    }
)
class LeaseSecondsField(serializers.IntegerField):
    """Bounded by settings; the service checks the bounds and names the field when refusing."""


# --- Tasks ------------------------------------------------------------------------------------


@extend_schema_field({"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$"})
class LabelNameField(serializers.CharField):
    """A label name; stored lower-cased (``tasks.models.Label`` checks the characters)."""


ALLOWED_PATHS_HELP = (
    "Globs relative to the repository root: no leading /, no .. segment, no backslash."
)


class TaskListCreateApi(generics.ListAPIView):
    """List the tasks of your projects (filter by project, state, label), or create a draft."""

    serializer_class = TaskSerializer
    pagination_class = IdCursorPagination
    filterset_class = TaskFilter

    class InputSerializer(JSONInputSerializer):
        read_only_from = TaskSerializer
        project = serializers.CharField(help_text="Project slug.")
        title = serializers.CharField(max_length=200)
        description = serializers.CharField(
            max_length=100_000, required=False, allow_blank=True, default=""
        )
        spec = serializers.CharField(
            required=False, allow_null=True, help_text="Spec key, e.g. FM-S1."
        )
        priority = serializers.IntegerField(
            required=False, default=0, min_value=-1000, max_value=1000
        )
        labels = serializers.ListField(
            child=LabelNameField(max_length=50), required=False, max_length=20, default=list
        )
        depends_on = serializers.ListField(
            child=serializers.CharField(max_length=32), required=False, max_length=100, default=list
        )
        allowed_paths = serializers.ListField(
            child=serializers.CharField(max_length=500),
            required=False,
            max_length=200,
            default=list,
            help_text=ALLOWED_PATHS_HELP,
        )
        max_attempts = serializers.IntegerField(required=False, min_value=1, max_value=100)

    def get_queryset(self):
        return (
            selectors.visible_tasks(self.request.user)
            .select_related("project", "spec")
            .prefetch_related("labels", "depends_on")
        )

    @extend_schema(responses={200: TaskSerializer(many=True), **errors(400, 404)})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(
        request=InputSerializer, responses={201: TaskSerializer, **errors(400, 403, 404)}
    )
    def post(self, request):
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = data.validated_data
        project = visible_project(request.user, fields.pop("project"))
        fields["spec"] = _spec_in(project, fields.get("spec"))
        fields["depends_on"] = _tasks_in(project, fields.get("depends_on", []))
        task = services.task_create(project=project, actor=request.user, **fields)
        return Response(TaskSerializer(task).data, status=status.HTTP_201_CREATED)


def _spec_in(project, key):
    if not key:
        return None
    try:
        return Spec.objects.get(project=project, key=key)
    except Spec.DoesNotExist:
        raise serializers.ValidationError({"spec": f"no spec {key} in {project.slug}"}) from None


def _tasks_in(project, keys):
    found = {t.key: t for t in Task.objects.filter(project=project, key__in=keys)}
    missing = [k for k in keys if k not in found]
    if missing:
        raise serializers.ValidationError(
            {"depends_on": f"no tasks {', '.join(missing)} in {project.slug}"}
        )
    return [found[k] for k in keys]


class TaskDetailApi(APIView):
    """Read a task, or edit a draft, ready or blocked one (managers)."""

    class InputSerializer(JSONInputSerializer):
        read_only_from = TaskSerializer
        title = serializers.CharField(max_length=200, required=False)
        description = serializers.CharField(max_length=100_000, required=False, allow_blank=True)
        spec = serializers.CharField(required=False, allow_null=True)
        priority = serializers.IntegerField(required=False, min_value=-1000, max_value=1000)
        labels = serializers.ListField(
            child=LabelNameField(max_length=50), required=False, max_length=20
        )
        depends_on = serializers.ListField(
            child=serializers.CharField(max_length=32), required=False, max_length=100
        )
        allowed_paths = serializers.ListField(
            child=serializers.CharField(max_length=500),
            required=False,
            max_length=200,
            help_text=ALLOWED_PATHS_HELP,
        )
        max_attempts = serializers.IntegerField(required=False, min_value=1, max_value=100)

    @extend_schema(responses={200: TaskSerializer, **errors(404)})
    def get(self, request, key):
        return Response(TaskSerializer(selectors.task_for(request.user, key)).data)

    @extend_schema(
        request=InputSerializer, responses={200: TaskSerializer, **errors(400, 403, 404, 409)}
    )
    def patch(self, request, key):
        task = selectors.task_for(request.user, key)
        data = self.InputSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        changes = dict(data.validated_data)
        if "spec" in changes:
            changes["spec"] = _spec_in(task.project, changes["spec"])
        if "depends_on" in changes:
            changes["depends_on"] = _tasks_in(task.project, changes["depends_on"])
        task = services.task_update(task=task, actor=request.user, **changes)
        return Response(TaskSerializer(task).data)


def _task_action(service, summary: str):
    class TaskActionApi(APIView):
        @extend_schema(
            request=ReasonSerializer,
            responses={200: TaskSerializer, **errors(400, 403, 404, 409)},
            summary=summary,
            operation_id=f"tasks_{service.__name__.removeprefix('task_')}",
        )
        def post(self, request, key):
            task = selectors.task_for(request.user, key)
            data = ReasonSerializer(data=request.data)
            data.is_valid(raise_exception=True)
            task = service(task=task, actor=request.user, reason=data.validated_data["reason"])
            return Response(TaskSerializer(task).data)

    TaskActionApi.__name__ = TaskActionApi.__qualname__ = (
        f"Task{service.__name__.removeprefix('task_').title()}Api"
    )
    return TaskActionApi


TaskPublishApi = _task_action(
    services.task_publish, "Publish a draft task (draft → ready). Managers."
)
TaskUnblockApi = _task_action(
    services.task_unblock, "Unblock a blocked task (blocked → ready). Managers."
)
TaskReopenApi = _task_action(
    services.task_reopen, "Reopen a failed task with a fresh attempt budget. Managers."
)
TaskCancelApi = _task_action(
    services.task_cancel, "Cancel a draft, ready, blocked or failed task. Managers."
)


class ClaimSerializer(serializers.Serializer):
    task = TaskSerializer()
    attempt = AttemptSerializer()


class TaskClaimApi(APIView):
    """Claim the best claimable task under a lease: 201 with the task and attempt, 204 if none."""

    class InputSerializer(JSONInputSerializer):
        project = serializers.CharField(
            required=False, help_text="Only claim in this project (slug)."
        )
        labels = serializers.ListField(
            child=serializers.CharField(max_length=50),
            required=False,
            max_length=20,
            default=list,
            help_text="Only claim tasks carrying every one of these labels.",
        )
        lease_seconds = LeaseSecondsField(required=False)

    @extend_schema(
        request=InputSerializer,
        responses={201: ClaimSerializer, 204: None, **errors(400, 403, 404)},
    )
    def post(self, request):
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = data.validated_data
        project = project_for(request.user, fields["project"]) if fields.get("project") else None
        attempt = services.task_claim(
            agent=request.user,
            project=project,
            labels=fields["labels"],
            lease_seconds=fields.get("lease_seconds"),
        )
        if attempt is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        task = attempt.task  # the row the claim locked, with its project and spec
        if not hasattr(task, "related_keys"):  # the one-statement claim loaded them
            prefetch_related_objects([task], "labels", "depends_on")
        if attempt.spec_version_id:
            prefetch_related_objects([attempt], "spec_version__spec")
        return Response(
            {"task": TaskSerializer(task).data, "attempt": AttemptSerializer(attempt).data},
            status=status.HTTP_201_CREATED,
        )


class ManifestItemSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(
        choices=["task", "spec_version", "checkpoint", "decision", "attempt", "dependency"]
    )
    id = serializers.CharField()
    version = serializers.IntegerField(
        required=False, help_text="For versioned items (spec, checkpoint)."
    )
    sha256 = serializers.CharField(
        required=False, help_text="For the others: the hash of the item's content."
    )
    chars = serializers.IntegerField()
    included = serializers.BooleanField(help_text="False when the budget (max_chars) dropped it.")


class ContextSerializer(serializers.Serializer):
    task = serializers.DictField(
        help_text="Title, description, labels, allowed paths, dependencies."
    )
    spec = serializers.DictField(
        allow_null=True,
        help_text="The pinned spec version with its criteria and what each needs as proof.",
    )
    checkpoint = serializers.DictField(
        allow_null=True, help_text="The latest checkpoint to resume from."
    )
    decisions = serializers.ListField(
        child=serializers.DictField(),
        help_text="Accepted decisions concerning the task or its spec.",
    )
    attempts = serializers.ListField(
        child=serializers.DictField(),
        help_text="Earlier attempts: why each ended, gate verdicts, evidence links.",
    )
    dependencies = serializers.ListField(
        child=serializers.DictField(), help_text="Outcomes of the tasks this one depends on."
    )
    manifest = ManifestItemSerializer(many=True)
    chars = serializers.IntegerField()
    max_chars = serializers.IntegerField(allow_null=True)
    bundle_sha256 = serializers.CharField()


class HandoffSerializer(serializers.Serializer):
    task = serializers.CharField()
    what_changed = serializers.DictField(allow_null=True)
    why = serializers.DictField()
    what_remains_open = serializers.DictField()
    authoritative_evidence = serializers.ListField(child=serializers.DictField())


class MarkdownRenderer(BaseRenderer):
    """Text a view has already rendered as Markdown (the context brief)."""

    media_type = "text/markdown"
    format = "markdown"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        return data.encode(self.charset)


class TaskContextApi(APIView):
    """The context bundle: the smallest current material that lets an agent act on the task.

    ``?format=markdown`` or ``Accept: text/markdown`` answers the brief (``tasks.brief``);
    the budget then bounds the Markdown, and the fetch is recorded the same way.
    """

    renderer_classes = [*api_settings.DEFAULT_RENDERER_CLASSES, MarkdownRenderer]

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "max_chars",
                {"type": "integer", "minimum": 1},
                description="Character budget; items are dropped least relevant first. "
                "For the Markdown brief it bounds the Markdown.",
            ),
            OpenApiParameter(
                "format",
                {"type": "string", "enum": ["json", "markdown"]},
                description="markdown: the bundle as a Markdown brief (as Accept: text/markdown).",
            ),
        ],
        responses={
            (200, "application/json"): ContextSerializer,
            (200, "text/markdown"): OpenApiTypes.STR,
            **{
                (code, "application/json"): response
                for code, response in errors(400, 403, 404, 409).items()
            },
        },
    )
    def get(self, request, key):
        task = selectors.task_for(request.user, key)
        max_chars = whole_number_param(request, "max_chars")
        markdown = isinstance(request.accepted_renderer, MarkdownRenderer)
        bundle = services.task_context(
            task=task, actor=request.user, max_chars=max_chars, markdown=markdown
        )
        return Response(brief.render(bundle) if markdown else bundle)

    def handle_exception(self, exc):
        # A refusal keeps the API's one error format, JSON, whatever format was asked for.
        if isinstance(getattr(self.request, "accepted_renderer", None), MarkdownRenderer):
            self.request.accepted_renderer = JSONRenderer()
            self.request.accepted_media_type = JSONRenderer.media_type
        return super().handle_exception(exc)


def _reason(schema_pattern: str, description: str) -> dict:
    return {
        "type": "string",
        "maxLength": 10_000,
        "pattern": schema_pattern,
        "description": description,
    }


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
        help_text="The last line; `line` if absent.",
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
                "reason": _reason(TEXT, "Optional note for the record."),
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
                "reason": _reason(
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
RELEASE_REQUEST = {
    "oneOf": [
        {
            "type": "object",
            "properties": {
                "reason": _reason(TEXT, "Why the task is given back."),
                "blocked": {"type": "boolean", "enum": [False], "default": False},
            },
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {
                "reason": _reason(NON_BLANK_TEXT, "What blocks the task, for the manager."),
                "blocked": {"type": "boolean", "enum": [True]},
            },
            "required": ["reason", "blocked"],
            "additionalProperties": False,
        },
    ]
}


class TaskReviewApi(APIView):
    """Approve or reject a task in review. Reviewers who did not submit the attempt."""

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
        task = selectors.task_for(request.user, key)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        # The answer is read in the same transaction as the verdict: if the database goes
        # away before the answer is built, the verdict is rolled back too, so the 503 the
        # caller gets is true ("nothing changed; retry") and its retry is not a 409.
        with transaction.atomic():
            task = services.task_review(task=task, actor=request.user, **data.validated_data)
            answer = TaskSerializer(task).data
        return Response(answer)


class TaskHandoffApi(APIView):
    """The four handoff answers: what changed, why, what remains open, which evidence is authoritative."""

    @extend_schema(responses={200: HandoffSerializer, **errors(404)})
    def get(self, request, key):
        return Response(handoff(selectors.task_for(request.user, key)))


class TaskEventsApi(generics.ListAPIView):
    """The task's audit trail: every transition of the task, its attempts and gate runs."""

    serializer_class = EventSerializer
    pagination_class = IdCursorPagination

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Event.objects.none()
        task = selectors.task_for(self.request.user, self.kwargs["key"])
        return Event.objects.filter(task=task).select_related("actor")

    @extend_schema(responses={200: EventSerializer(many=True), **errors(400, 404)})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


# --- Attempts --------------------------------------------------------------------------------


class AttemptDetailApi(APIView):
    """An attempt with its gate runs and review verdict."""

    @extend_schema(responses={200: AttemptDetailSerializer, **errors(404)})
    def get(self, request, attempt_id):
        attempt = selectors.attempt_for(request.user, attempt_id)
        return Response(AttemptDetailSerializer(attempt).data)


class LeaseSerializer(serializers.Serializer):
    attempt = serializers.IntegerField()
    lease_expires_at = serializers.DateTimeField()
    heartbeat_at = serializers.DateTimeField()


class AttemptHeartbeatApi(APIView):
    """Extend the lease. 409 lease_lost once it has run out."""

    class InputSerializer(JSONInputSerializer):
        lease_seconds = LeaseSecondsField(required=False)

    @extend_schema(
        request=InputSerializer, responses={200: LeaseSerializer, **errors(400, 403, 404, 409)}
    )
    def post(self, request, attempt_id):
        attempt = selectors.attempt_for(request.user, attempt_id)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        attempt = services.attempt_heartbeat(
            attempt=attempt,
            actor=request.user,
            lease_seconds=data.validated_data.get("lease_seconds"),
        )
        return Response(
            {
                "attempt": attempt.pk,
                "lease_expires_at": attempt.lease_expires_at,
                "heartbeat_at": attempt.heartbeat_at,
            }
        )


class CheckpointSerializer(serializers.Serializer):
    data = serializers.JSONField(allow_null=True)
    revision = serializers.IntegerField()
    saved_at = serializers.DateTimeField(allow_null=True)


class AttemptCheckpointApi(APIView):
    """Read or save the checkpoint the agent resumes from (optimistic revisions)."""

    class InputSerializer(JSONInputSerializer):
        read_only_from = CheckpointSerializer
        data = serializers.JSONField(help_text="Anything the agent needs to resume.")
        revision = serializers.IntegerField(
            min_value=0, help_text="The revision you last saw; 0 for none."
        )

    @extend_schema(responses={200: CheckpointSerializer, **errors(404)})
    def get(self, request, attempt_id):
        attempt = selectors.attempt_for(request.user, attempt_id)
        return Response(_checkpoint(attempt))

    @extend_schema(
        request=InputSerializer, responses={200: CheckpointSerializer, **errors(400, 403, 404, 409)}
    )
    def put(self, request, attempt_id):
        attempt = selectors.attempt_for(request.user, attempt_id)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        attempt = services.attempt_checkpoint_save(
            attempt=attempt,
            actor=request.user,
            data=data.validated_data["data"],
            revision=data.validated_data["revision"],
        )
        return Response(_checkpoint(attempt))


def _checkpoint(attempt) -> dict:
    return {
        "data": attempt.checkpoint,
        "revision": attempt.checkpoint_revision,
        "saved_at": attempt.checkpoint_at,
    }


class SubmitReceiptSerializer(serializers.Serializer):
    attempt = serializers.IntegerField()
    task = serializers.CharField()
    state = serializers.CharField()
    submitted_at = serializers.DateTimeField()
    summary = serializers.CharField()
    change = ChangeSerializer()
    status_url = serializers.CharField()


class AttemptSubmitApi(APIView):
    """Submit for checking; send an ``Idempotency-Key`` header so a retry is safe."""

    class InputSerializer(JSONInputSerializer):
        summary = serializers.CharField(
            max_length=10_000, help_text="What changed and why, for the reviewer."
        )
        change = ChangeSerializer(required=False, default=dict)

    @extend_schema(
        request=InputSerializer,
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                {"type": "string", "maxLength": 255},
                OpenApiParameter.HEADER,
                description="A retry with the same key returns the same answer and changes nothing.",
            )
        ],
        responses={202: SubmitReceiptSerializer, **errors(400, 403, 404, 409)},
    )
    def post(self, request, attempt_id):
        attempt = selectors.attempt_for(request.user, attempt_id)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        key = request.headers.get("Idempotency-Key", "").strip()
        if len(key) > 255:
            raise serializers.ValidationError({"Idempotency-Key": "at most 255 characters"})
        attempt = services.attempt_submit(
            attempt=attempt,
            actor=request.user,
            summary=data.validated_data["summary"],
            change=dict(data.validated_data["change"]),
            idempotency_key=key,
        )
        status_url = reverse("api-attempt", kwargs={"attempt_id": attempt.pk})
        answer = {**attempt.submit_receipt, "status_url": status_url}
        return Response(answer, status=status.HTTP_202_ACCEPTED)


class AttemptReleaseApi(APIView):
    """Give the task back (→ ready) or mark it blocked (→ blocked; a reason is required)."""

    class InputSerializer(JSONInputSerializer):
        reason = serializers.CharField(
            max_length=10_000, required=False, allow_blank=True, default=""
        )
        blocked = serializers.BooleanField(required=False, default=False)

    @extend_schema(
        request={"application/json": RELEASE_REQUEST},
        responses={200: AttemptSerializer, **errors(400, 403, 404, 409)},
    )
    def post(self, request, attempt_id):
        attempt = selectors.attempt_for(request.user, attempt_id)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        attempt = services.attempt_release(
            attempt=attempt, actor=request.user, **data.validated_data
        )
        return Response(AttemptSerializer(attempt).data)


class AttemptDecisionCreateApi(APIView):
    """Propose a decision during your attempt (the lease holder only)."""

    @extend_schema(
        request=decision_api.DecisionInputSerializer,
        responses={201: decision_api.DecisionSerializer, **errors(400, 403, 404, 409)},
    )
    def post(self, request, attempt_id):
        attempt = selectors.attempt_for(request.user, attempt_id)
        data = decision_api.DecisionInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        decision = decision_api.propose(
            request, attempt.task.project, data.validated_data, attempt=attempt
        )
        return Response(
            decision_api.DecisionSerializer(
                decision_api.decisions_queryset().get(pk=decision.pk)
            ).data,
            status=status.HTTP_201_CREATED,
        )


class AttemptEvidenceApi(APIView):
    """Attach a file to an attempt (the lease holder: agent evidence; a verifier: authoritative)."""

    parser_classes = [MultiPartParser]

    class InputSerializer(KnownFieldsSerializer):
        read_only_from = evidence_api.EvidenceSerializer
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

    @extend_schema(responses={200: evidence_api.EvidenceSerializer(many=True), **errors(404)})
    def get(self, request, attempt_id):
        attempt = selectors.attempt_for(request.user, attempt_id)
        rows = attempt.evidence.prefetch_related("criteria").order_by("id")
        return Response(evidence_api.EvidenceSerializer(rows, many=True).data)

    @extend_schema(
        request={"multipart/form-data": InputSerializer},
        responses={201: evidence_api.EvidenceSerializer, **errors(400, 403, 404, 409, 413)},
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
        # Every name the form sent, so that one the upload does not take is refused.
        fields = {name: request.data.get(name) for name in request.data}
        data = self.InputSerializer(data={**fields, "criteria": criteria})
        data.is_valid(raise_exception=True)
        upload = data.validated_data["file"]
        evidence = evidence_services.evidence_attach(
            attempt=attempt,
            actor=request.user,
            file=upload,
            kind=data.validated_data["kind"],
            criteria=data.validated_data["criteria"],
            name=upload.name,
            media_type=upload.content_type or "",
            sha256=getattr(upload, "sha256", None) or None,
        )
        return Response(
            evidence_api.EvidenceSerializer(evidence).data, status=status.HTTP_201_CREATED
        )


class AttemptCommentsApi(APIView):
    """Comments on lines of the attempt's diff: members read them; a reviewer who did not
    submit the attempt writes them while it waits for review."""

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
        attempt = selectors.attempt_for(request.user, attempt_id)
        data = CommentInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        comment = services.comment_add(attempt=attempt, actor=request.user, **data.validated_data)
        return Response(LineCommentSerializer(comment).data, status=201)


class CommentResolveApi(APIView):
    """Mark a comment resolved by hand (reviewers)."""

    @extend_schema(
        request=NoInputSerializer,
        responses={200: LineCommentSerializer, **errors(400, 403, 404, 409)},
    )
    def post(self, request, attempt_id, comment_id):
        attempt = selectors.attempt_for(request.user, attempt_id)
        NoInputSerializer(data=request.data).is_valid(raise_exception=True)
        comment = attempt.comments.select_related("author", "attempt__task").get(pk=comment_id)
        comment = services.comment_resolve(comment=comment, actor=request.user)
        return Response(LineCommentSerializer(comment).data)
