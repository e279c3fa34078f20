"""Specs and decisions in the agent contract (``/api/v1/specs/``, ``/api/v1/decisions/``)."""

import django_filters
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import generics, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from decisions import services
from decisions.models import DECIDER, Check, Decision, DecisionState, Spec, SpecVersion
from decisions.selectors import decision_impact, search_decisions
from decisions.services import CRITERION_KEY
from projects.access import Writers
from projects.kinds import Kind
from projects.rest import (
    NON_BLANK_TEXT,
    IdCursorPagination,
    JSONInputSerializer,
    NewestFirstPagination,
    ReasonSerializer,
    RequiredReasonSerializer,
    errors,
)
from projects.roles import MANAGER, Role, role_rule
from projects.selectors import project_ids_for, visible_project

# --- Output ---------------------------------------------------------------------------------


class CriterionSerializer(serializers.Serializer):
    key = serializers.CharField()
    text = serializers.CharField()
    proof = serializers.JSONField()


class SpecVersionSerializer(serializers.ModelSerializer):
    spec = serializers.CharField(source="spec.key", read_only=True)
    author = serializers.CharField(source="author.username", read_only=True, allow_null=True)
    source_decision = serializers.SlugRelatedField(
        read_only=True, slug_field="key", allow_null=True
    )
    criteria = CriterionSerializer(many=True, read_only=True)

    class Meta:
        model = SpecVersion
        fields = [
            "spec",
            "number",
            "state",
            "body",
            "criteria",
            "author",
            "source_decision",
            "created_at",
            "accepted_at",
        ]
        read_only_fields = fields


class SpecVersionBriefSerializer(serializers.ModelSerializer):
    class Meta:
        model = SpecVersion
        fields = ["number", "state", "created_at", "accepted_at"]
        read_only_fields = fields


class SpecSerializer(serializers.ModelSerializer):
    project = serializers.CharField(source="project.slug", read_only=True)
    versions = SpecVersionBriefSerializer(many=True, read_only=True)
    current_version = serializers.SerializerMethodField()

    class Meta:
        model = Spec
        fields = ["key", "project", "title", "current_version", "versions", "created_at"]
        read_only_fields = fields

    def get_current_version(self, spec) -> int | None:
        accepted = [v.number for v in spec.versions.all() if v.state == "accepted"]
        return accepted[0] if accepted else None


class AlternativeSerializer(JSONInputSerializer):
    option = serializers.CharField(max_length=500)
    reason = serializers.CharField(max_length=5_000, required=False, allow_blank=True, default="")


class AmendmentSerializer(serializers.Serializer):
    spec = serializers.CharField(source="spec.key")
    base_version = serializers.IntegerField(source="base_version.number", allow_null=True)
    body = serializers.CharField()
    criteria = serializers.JSONField()


class DecisionSerializer(serializers.ModelSerializer):
    project = serializers.CharField(source="project.slug", read_only=True)
    proposed_by = serializers.CharField(source="proposed_by.username", read_only=True)
    proposed_in = serializers.SerializerMethodField()
    decided_by = serializers.CharField(
        source="decided_by.username", read_only=True, allow_null=True
    )
    supersedes = serializers.SlugRelatedField(many=True, read_only=True, slug_field="key")
    superseded_by = serializers.SlugRelatedField(many=True, read_only=True, slug_field="key")
    tasks = serializers.SlugRelatedField(many=True, read_only=True, slug_field="key")
    specs = serializers.SlugRelatedField(many=True, read_only=True, slug_field="key")
    amendments = AmendmentSerializer(many=True, read_only=True)
    alternatives = AlternativeSerializer(many=True, read_only=True)

    class Meta:
        model = Decision
        fields = [
            "key",
            "project",
            "title",
            "state",
            "context",
            "decision",
            "consequences",
            "alternatives",
            "proposed_by",
            "proposed_in",
            "decided_by",
            "decided_at",
            "verdict_reason",
            "supersedes",
            "superseded_by",
            "tasks",
            "specs",
            "amendments",
            "created_at",
        ]
        read_only_fields = fields

    def get_proposed_in(self, decision) -> str | None:
        return str(decision.proposed_in) if decision.proposed_in_id else None


def decisions_queryset():
    return Decision.objects.select_related(
        "project", "proposed_by", "decided_by", "proposed_in__task"
    ).prefetch_related(
        "supersedes",
        "superseded_by",
        "tasks",
        "specs",
        "amendments__spec",
        "amendments__base_version",
    )


# --- Input --------------------------------------------------------------------------------------


@extend_schema_field(
    {
        "oneOf": [
            {
                "type": "object",
                "properties": {
                    "check": {"type": "string", "enum": [Check.TESTS.value]},
                    "select": {
                        "type": "string",
                        "pattern": NON_BLANK_TEXT,
                        "description": "Test ids that prove it, e.g. tests/test_claim.py::*",
                    },
                },
                "required": ["check", "select"],
            },
            {
                "type": "object",
                "properties": {
                    "check": {"type": "string", "enum": [Check.EVIDENCE.value]},
                    "kind": {"type": "string", "enum": Kind.values},
                },
                "required": ["check", "kind"],
            },
            {
                "type": "object",
                "properties": {"check": {"type": "string", "enum": [Check.REVIEW.value]}},
                "required": ["check"],
            },
        ]
    }
)
class ProofField(serializers.JSONField):
    """The check that proves a criterion; ``decisions.services.clean_criteria`` validates it."""


@extend_schema_field({"type": "string", "pattern": CRITERION_KEY.pattern})
class CriterionKeyField(serializers.CharField):
    """A criterion key such as ``AC-1``; the service checks it and that keys are unique."""


class CriterionInputSerializer(JSONInputSerializer):
    key = CriterionKeyField(max_length=32)
    text = serializers.CharField(max_length=5_000)
    proof = ProofField(
        help_text='{"check": "tests", "select": "..."} | {"check": "evidence", "kind": "..."} | {"check": "review"}'
    )


class AmendmentInputSerializer(JSONInputSerializer):
    spec = serializers.CharField(help_text="Key of the spec this decision amends.")
    body = serializers.CharField(max_length=200_000)
    criteria = CriterionInputSerializer(many=True, max_length=200)


class DecisionInputSerializer(JSONInputSerializer):
    read_only_from = DecisionSerializer
    title = serializers.CharField(max_length=200)
    context = serializers.CharField(max_length=50_000)
    decision = serializers.CharField(max_length=50_000)
    consequences = serializers.CharField(
        max_length=50_000, required=False, allow_blank=True, default=""
    )
    alternatives = AlternativeSerializer(many=True, required=False, default=list, max_length=50)
    supersedes = serializers.ListField(
        child=serializers.CharField(max_length=32), required=False, default=list, max_length=50
    )
    tasks = serializers.ListField(
        child=serializers.CharField(max_length=32), required=False, default=list, max_length=100
    )
    specs = serializers.ListField(
        child=serializers.CharField(max_length=32), required=False, default=list, max_length=50
    )
    amendments = AmendmentInputSerializer(many=True, required=False, default=list, max_length=20)


def _resolve(model, project, keys, field):
    found = {o.key: o for o in model.objects.filter(project=project, key__in=keys)}
    missing = [k for k in keys if k not in found]
    if missing:
        raise serializers.ValidationError({field: f"not in {project.slug}: {', '.join(missing)}"})
    return [found[k] for k in keys]


def propose(request, project, data: dict, attempt=None) -> Decision:
    specs = [item["spec"] for item in data["amendments"]]
    if len(set(specs)) < len(specs):
        raise serializers.ValidationError({"amendments": "amend each spec at most once"})
    amendments = []
    for item in data["amendments"]:
        spec = _resolve(Spec, project, [item["spec"]], "amendments")[0]
        amendments.append(
            {"spec": spec, "body": item["body"], "criteria": [dict(c) for c in item["criteria"]]}
        )
    return services.decision_propose(
        project=project,
        actor=request.user,
        attempt=attempt,
        title=data["title"],
        context=data["context"],
        decision=data["decision"],
        consequences=data["consequences"],
        alternatives=[dict(a) for a in data["alternatives"]],
        supersedes=_resolve(Decision, project, data["supersedes"], "supersedes"),
        # The tasks it concerns, through the relation's own model: decisions sit below tasks.
        tasks=_resolve(Decision.tasks.field.related_model, project, data["tasks"], "tasks"),
        specs=_resolve(Spec, project, data["specs"], "specs"),
        amendments=amendments,
    )


# --- Specs ---------------------------------------------------------------------------------------


class SpecListCreateApi(generics.ListAPIView):
    """List the specs of your projects, or create one with version 1 as a draft (managers)."""

    serializer_class = SpecSerializer
    pagination_class = IdCursorPagination
    filterset_fields = {"project__slug": ["exact"]}
    writers = Writers(MANAGER, project_field="project")

    class InputSerializer(JSONInputSerializer):
        read_only_from = SpecSerializer
        project = serializers.CharField(help_text="Project slug.")
        title = serializers.CharField(max_length=200)
        body = serializers.CharField(max_length=200_000)
        criteria = CriterionInputSerializer(many=True, max_length=200)

    def get_queryset(self):
        return (
            Spec.objects.filter(project_id__in=project_ids_for(self.request.user))
            .select_related("project")
            .prefetch_related("versions")
        )

    @extend_schema(responses={200: SpecSerializer(many=True), **errors(400, 404)})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(
        request=InputSerializer, responses={201: SpecSerializer, **errors(400, 403, 404)}
    )
    def post(self, request):
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = data.validated_data
        project = visible_project(request.user, fields["project"])
        spec = services.spec_create(
            project=project,
            actor=request.user,
            title=fields["title"],
            body=fields["body"],
            criteria=[dict(c) for c in fields["criteria"]],
        )
        return Response(SpecSerializer(spec).data, status=status.HTTP_201_CREATED)


def spec_for(user, key) -> Spec:
    return (
        Spec.objects.filter(project_id__in=project_ids_for(user))
        .select_related("project")
        .get(key=key)
    )


class SpecDetailApi(APIView):
    @extend_schema(responses={200: SpecSerializer, **errors(404)})
    def get(self, request, key):
        return Response(SpecSerializer(spec_for(request.user, key)).data)


class SpecVersionCreateApi(APIView):
    """Add the next version of a spec as a draft (managers)."""

    writers = Writers(MANAGER)

    def write_target(self, request, key):
        return spec_for(request.user, key)

    class InputSerializer(JSONInputSerializer):
        read_only_from = SpecVersionSerializer
        body = serializers.CharField(max_length=200_000)
        criteria = CriterionInputSerializer(many=True, max_length=200)

    @extend_schema(
        request=InputSerializer, responses={201: SpecVersionSerializer, **errors(400, 403, 404)}
    )
    def post(self, request, key):
        spec = self.target
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        version = services.spec_version_create(
            spec=spec,
            actor=request.user,
            body=data.validated_data["body"],
            criteria=[dict(c) for c in data.validated_data["criteria"]],
        )
        return Response(SpecVersionSerializer(version).data, status=status.HTTP_201_CREATED)


class SpecVersionDetailApi(APIView):
    @extend_schema(responses={200: SpecVersionSerializer, **errors(404)})
    def get(self, request, key, number):
        version = (
            spec_for(request.user, key).versions.prefetch_related("criteria").get(number=number)
        )
        return Response(SpecVersionSerializer(version).data)


class SpecVersionAcceptApi(APIView):
    """Accept a draft version; the current accepted version becomes superseded (managers)."""

    writers = Writers(MANAGER)

    def write_target(self, request, key, number):
        return spec_for(request.user, key)

    @extend_schema(
        request=ReasonSerializer,
        responses={200: SpecVersionSerializer, **errors(400, 403, 404, 409)},
    )
    def post(self, request, key, number):
        version = self.target.versions.get(number=number)
        data = ReasonSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        version = services.spec_version_accept(
            version=version, actor=request.user, reason=data.validated_data["reason"]
        )
        return Response(SpecVersionSerializer(version).data)


# --- Decisions ----------------------------------------------------------------------------------


class DecisionFilter(django_filters.FilterSet):
    q = django_filters.CharFilter(
        method="search", help_text="Words to find in title, context, decision, consequences."
    )
    project = django_filters.CharFilter(field_name="project__slug")
    state = django_filters.MultipleChoiceFilter(choices=DecisionState.choices)
    spec = django_filters.CharFilter(field_name="specs__key", distinct=True)
    task = django_filters.CharFilter(field_name="tasks__key", distinct=True)

    class Meta:
        model = Decision
        fields = ["q", "project", "state", "spec", "task"]

    def search(self, queryset, name, value):
        return search_decisions(queryset, value)


class DecisionListCreateApi(generics.ListAPIView):
    """Search the decisions of your projects (``?q=``), or propose one (reviewers, managers)."""

    serializer_class = DecisionSerializer
    pagination_class = NewestFirstPagination
    filterset_class = DecisionFilter
    writers = Writers(role_rule(Role.REVIEWER, Role.MANAGER), project_field="project")

    class InputSerializer(DecisionInputSerializer):
        project = serializers.CharField(help_text="Project slug.")

    def get_queryset(self):
        return decisions_queryset().filter(project_id__in=project_ids_for(self.request.user))

    @extend_schema(responses={200: DecisionSerializer(many=True), **errors(400, 404)})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(
        request=InputSerializer, responses={201: DecisionSerializer, **errors(400, 403, 404)}
    )
    def post(self, request):
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        project = visible_project(request.user, data.validated_data["project"])
        decision = propose(request, project, data.validated_data)
        return Response(
            DecisionSerializer(decisions_queryset().get(pk=decision.pk)).data,
            status=status.HTTP_201_CREATED,
        )


def decision_for(user, key) -> Decision:
    return decisions_queryset().filter(project_id__in=project_ids_for(user)).get(key=key)


class DecisionDetailApi(APIView):
    @extend_schema(responses={200: DecisionSerializer, **errors(404)})
    def get(self, request, key):
        return Response(DecisionSerializer(decision_for(request.user, key)).data)


class CriterionTextSerializer(serializers.Serializer):
    text = serializers.CharField()
    proof = serializers.JSONField()


class CriterionChangeSerializer(serializers.Serializer):
    change = serializers.ChoiceField(choices=["added", "removed", "changed"])
    key = serializers.CharField()
    before = CriterionTextSerializer(allow_null=True, help_text="null when added.")
    after = CriterionTextSerializer(allow_null=True, help_text="null when removed.")


class AmendedSpecSerializer(serializers.Serializer):
    spec = serializers.CharField()
    title = serializers.CharField()
    version = serializers.IntegerField(help_text="The version the decision created.")
    state = serializers.CharField(help_text="accepted, or superseded by a later version.")
    base_version = serializers.IntegerField(
        allow_null=True, help_text="The version before it; null for a spec's first version."
    )
    body_diff = serializers.ListField(
        child=serializers.ListField(child=serializers.CharField(), min_length=2, max_length=2),
        help_text="Unified diff lines of the body as [kind, line]; kind hunk, add, del or ctx.",
    )
    criteria_changes = CriterionChangeSerializer(many=True)
    criteria_unchanged = serializers.ListField(child=serializers.CharField())


class BoundTaskSerializer(serializers.Serializer):
    task = serializers.CharField()
    title = serializers.CharField()
    state = serializers.CharField()
    via = serializers.CharField(
        help_text='"task" when the decision names it, else its spec\'s key.'
    )


class ApprovalSerializer(serializers.Serializer):
    task = serializers.CharField()
    title = serializers.CharField()
    attempt = serializers.IntegerField(help_text="The attempt's number in its task.")
    reviewer = serializers.CharField(allow_null=True)
    judged_at = serializers.CharField(allow_null=True, help_text="When the reviewer decided.")
    spec = serializers.CharField(
        allow_null=True, help_text='The version judged against: "FM-S1 v2".'
    )


class DecisionImpactSerializer(serializers.Serializer):
    decision = serializers.CharField()
    state = serializers.ChoiceField(choices=DecisionState.choices)
    amended = AmendedSpecSerializer(
        many=True, help_text="The spec versions its acceptance created, with their diffs."
    )
    tasks = BoundTaskSerializer(many=True, help_text="The tasks it binds, named or by spec.")
    approvals = ApprovalSerializer(
        many=True, help_text="Approvals of those tasks judged while it was in force."
    )
    approvals_without = ApprovalSerializer(
        many=True, help_text="Their approvals judged when it was not in force."
    )


class DecisionImpactApi(APIView):
    """What a decision changed: the specs it amended (each version's diff), the tasks it
    binds and the approvals judged while it was in force (``decisions.selectors.decision_impact``)."""

    @extend_schema(responses={200: DecisionImpactSerializer, **errors(404)})
    def get(self, request, key):
        decision = Decision.objects.filter(project_id__in=project_ids_for(request.user)).get(
            key=key
        )
        return Response(DecisionImpactSerializer(decision_impact(decision)).data)


def _decision_action(service, summary: str, request=ReasonSerializer):
    class DecisionActionApi(APIView):
        writers = Writers(DECIDER)

        def write_target(self, request, key):
            return decision_for(request.user, key)

        @extend_schema(
            request=request,
            responses={200: DecisionSerializer, **errors(400, 403, 404, 409)},
            summary=summary,
            operation_id=f"decisions_{service.__name__.removeprefix('decision_')}",
        )
        def post(self, request, key):
            decision = self.target
            data = ReasonSerializer(data=request.data)
            data.is_valid(raise_exception=True)
            service(decision=decision, actor=request.user, reason=data.validated_data["reason"])
            return Response(DecisionSerializer(decision_for(request.user, key)).data)

    DecisionActionApi.__name__ = DecisionActionApi.__qualname__ = (
        f"Decision{service.__name__.removeprefix('decision_').title()}Api"
    )
    return DecisionActionApi


DecisionAcceptApi = _decision_action(
    services.decision_accept,
    "Accept a proposed decision (reviewers, managers; amending ones: managers).",
)
DecisionRejectApi = _decision_action(
    services.decision_reject,
    "Reject a proposed decision; a reason is required.",
    request=RequiredReasonSerializer,
)
