"""The agent contract for tasks (``/api/v1/tasks/``): list, create, read and edit a task,
its state changes, its context bundle, handoff and audit trail.

The rest of the contract lives beside it: the claim and everything an agent does within
an attempt in ``tasks.api_attempts``, the reviewer's verdict and line comments in
``tasks.api_review``. Views validate input at the edge and call one service; services own
permissions, locks and state. Every object is looked up through the caller's memberships,
so another project's task or attempt is a 404.
"""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import generics, serializers, status
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from decisions.models import Spec
from projects.access import Writers
from projects.models import Event
from projects.numbers import WHOLE_MAX
from projects.paths import ALLOWED_PATH_PATTERN
from projects.rest import (
    EditInputMixin,
    IdCursorPagination,
    JSONInputSerializer,
    ReasonSerializer,
    budget_field,
    errors,
    whole_number_param,
)
from projects.roles import MANAGER
from projects.selectors import visible_project
from tasks import brief, selectors, services
from tasks.filters import TaskFilter
from tasks.handoff import handoff
from tasks.models import Task, TaskState

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
    budget_usd = serializers.DecimalField(
        max_digits=10,
        decimal_places=2,
        read_only=True,
        allow_null=True,
        help_text="What one attempt may cost (self-reported usage); null: no limit.",
    )
    attempt_count = serializers.IntegerField(read_only=True)
    failed_attempts = serializers.IntegerField(read_only=True)
    current_attempt = serializers.IntegerField(
        source="current_attempt_id", read_only=True, allow_null=True
    )
    landed_commit = serializers.CharField(
        read_only=True, help_text="The commit on the landing target that carries its change."
    )
    created_at = serializers.DateTimeField(read_only=True)
    updated_at = serializers.DateTimeField(read_only=True)


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


def reason_schema(schema_pattern: str, description: str) -> dict:
    """The schema of a free-text reason (a verdict's, a release's) matching ``schema_pattern``."""
    return {
        "type": "string",
        "maxLength": 10_000,
        "pattern": schema_pattern,
        "description": description,
    }


# --- Tasks ------------------------------------------------------------------------------------


@extend_schema_field({"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$"})
class LabelNameField(serializers.CharField):
    """A label name; stored lower-cased (``tasks.models.Label`` checks the characters)."""


ALLOWED_PATHS_HELP = (
    "Globs relative to the repository root: no leading /, no .. segment, no backslash."
)


@extend_schema_field({"type": "string", "pattern": ALLOWED_PATH_PATTERN, "maxLength": 500})
class AllowedPathField(serializers.CharField):
    """A glob of ``allowed_paths``; ``projects.paths.clean_allowed_paths`` checks it."""


# What a manager writes of a task, each field declared once: required and defaulted as at
# its creation (TaskListCreateApi); an edit (TaskDetailApi) requires none and applies no
# default. (No docstrings: drf-spectacular would show them on the input schemas.)
class TaskInput(JSONInputSerializer):
    read_only_from = TaskSerializer
    title = serializers.CharField(max_length=200)
    description = serializers.CharField(
        max_length=100_000, required=False, allow_blank=True, default=""
    )
    spec = serializers.CharField(required=False, allow_null=True, help_text="Spec key, e.g. FM-S1.")
    priority = serializers.IntegerField(required=False, default=0, min_value=-1000, max_value=1000)
    labels = serializers.ListField(
        child=LabelNameField(max_length=50), required=False, max_length=20, default=list
    )
    depends_on = serializers.ListField(
        child=serializers.CharField(max_length=32), required=False, max_length=100, default=list
    )
    allowed_paths = serializers.ListField(
        child=AllowedPathField(max_length=500),
        required=False,
        max_length=200,
        default=list,
        help_text=ALLOWED_PATHS_HELP,
    )
    max_attempts = serializers.IntegerField(required=False, min_value=1, max_value=100)
    budget_usd = budget_field(services.TASK_BUDGET_DIGITS)(
        required=False,
        help_text="What one attempt may cost by its agent's self-reported usage; an "
        "attempt that reaches it is ended (409 budget_exhausted). Null: no limit.",
    )


class ProjectSlugInput(serializers.Serializer):
    project = serializers.CharField(help_text="Project slug.")


class TaskListCreateApi(generics.ListAPIView):
    """List the tasks of your projects (filter by project, state, label, text), or create a draft."""

    serializer_class = TaskSerializer
    pagination_class = IdCursorPagination
    filterset_class = TaskFilter
    writers = Writers(MANAGER, project_field="project")

    # The project comes first, as it always has in the schema.
    class InputSerializer(ProjectSlugInput, TaskInput):
        pass

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

    writers = Writers(MANAGER)

    def write_target(self, request, key):
        return selectors.task_for(request.user, key)

    class InputSerializer(EditInputMixin, TaskInput):
        pass

    @extend_schema(responses={200: TaskSerializer, **errors(404)})
    def get(self, request, key):
        return Response(TaskSerializer(selectors.task_for(request.user, key)).data)

    @extend_schema(
        request=InputSerializer, responses={200: TaskSerializer, **errors(400, 403, 404, 409)}
    )
    def patch(self, request, key):
        task = self.target
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
        writers = Writers(MANAGER)

        def write_target(self, request, key):
            return selectors.task_for(request.user, key)

        @extend_schema(
            request=ReasonSerializer,
            responses={200: TaskSerializer, **errors(400, 403, 404, 409)},
            summary=summary,
            operation_id=f"tasks_{service.__name__.removeprefix('task_')}",
        )
        def post(self, request, key):
            task = self.target
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


# --- Context and handoff ------------------------------------------------------------------


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
                {"type": "integer", "minimum": 1, "maximum": WHOLE_MAX},
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

    def perform_content_negotiation(self, request, force=False):
        # DRF passes over an empty ?format= and takes the last of two; the schema lists
        # the two formats this view answers in, given once. (force: answering an error.)
        given = request.query_params.getlist("format")
        if not force and given and (len(given) > 1 or given[0] not in ("json", "markdown")):
            raise serializers.ValidationError({"format": ["json or markdown, given once"]})
        return super().perform_content_negotiation(request, force)

    def handle_exception(self, exc):
        # A refusal keeps the API's one error format, JSON, whatever format was asked for.
        # (No renderer yet: the format itself was refused.)
        accepted = getattr(self.request, "accepted_renderer", None)
        if accepted is None or isinstance(accepted, MarkdownRenderer):
            self.request.accepted_renderer = JSONRenderer()
            self.request.accepted_media_type = JSONRenderer.media_type
        return super().handle_exception(exc)


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
