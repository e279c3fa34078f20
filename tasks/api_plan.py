"""The plan of a project (``GET /api/v1/projects/{slug}/plan/``): its unfinished tasks as a
dependency graph, the cycles, the critical path and a forecast (``tasks.plan``). Members.
"""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from projects.rest import errors, whole_number_param
from projects.selectors import visible_project
from tasks.models import TaskState
from tasks.plan import SEED_MAX, plan_for, spec_in

# The serializers describe the answer for the schema; the view answers the plan's dict as
# it is (already JSON), which the tests check against them.


class PlanNodeSerializer(serializers.Serializer):
    key = serializers.CharField()
    title = serializers.CharField()
    state = serializers.ChoiceField(choices=TaskState.choices)
    labels = serializers.ListField(child=serializers.CharField())
    spec = serializers.CharField(allow_null=True)
    weight_hours = serializers.FloatField(
        allow_null=True,
        help_text="Expected hours, from how long finished tasks took here; null when finished.",
    )
    weight_basis = serializers.CharField(
        help_text='What the weight rests on: "label backend: median of 7", "project: median'
        ' of 12", "default: no history", or "finished".'
    )
    blocked_by = serializers.ListField(
        child=serializers.CharField(),
        help_text="Its dependencies that are not done (cancelled ones too: they never will be).",
    )
    in_cycle = serializers.BooleanField(
        help_text="It waits on itself through other tasks: it cannot be claimed."
    )
    on_critical_path = serializers.BooleanField()
    url = serializers.CharField(help_text="The task's page.")


PlanEdgeSerializer = type(
    "PlanEdgeSerializer",
    (serializers.Serializer,),
    {
        "from": serializers.CharField(help_text="The dependency."),
        "to": serializers.CharField(help_text="The task that depends on it."),
    },
)


class CriticalPathSerializer(serializers.Serializer):
    keys = serializers.ListField(
        child=serializers.CharField(),
        help_text="The chain of unfinished tasks with the most expected hours, first to last.",
    )
    hours = serializers.FloatField()
    weights = serializers.CharField(help_text="What the weights rest on, in words.")
    default_hours = serializers.FloatField(help_text="A task's weight when nothing is known.")


class ForecastSerializer(serializers.Serializer):
    p50 = serializers.DateField(allow_null=True)
    p85 = serializers.DateField(allow_null=True)
    p50_days = serializers.IntegerField(allow_null=True)
    p85_days = serializers.IntegerField(allow_null=True)
    open = serializers.IntegerField(help_text="Unfinished tasks among the nodes.")
    samples_days = serializers.IntegerField(help_text="Past days drawn from (30).")
    completed_in_window = serializers.IntegerField()
    trials = serializers.IntegerField()
    seed = serializers.IntegerField()
    horizon_days = serializers.IntegerField()
    basis = serializers.CharField(help_text="How much history the forecast rests on.")
    reason = serializers.CharField(allow_null=True, help_text="Why a date is null.")


class PlanSerializer(serializers.Serializer):
    project = serializers.CharField()
    spec = serializers.CharField(allow_null=True)
    nodes = PlanNodeSerializer(many=True)
    edges = PlanEdgeSerializer(many=True, help_text="`to` depends on `from`.")
    cycles = serializers.ListField(
        child=serializers.ListField(child=serializers.CharField()),
        help_text="Groups of unfinished tasks that wait on each other.",
    )
    critical_path = CriticalPathSerializer()
    forecast = ForecastSerializer()


class PlanApi(APIView):
    """The plan of a project (members): every unfinished task, or with ``spec`` that
    spec's tasks and what they wait on, with cycles, critical path and forecast."""

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "spec", str, description="A spec key of the project, e.g. FM-S1 (404 otherwise)."
            ),
            OpenApiParameter(
                "seed",
                {"type": "integer", "minimum": 1, "maximum": SEED_MAX},
                description="The forecast's random seed (default: one fixed per project).",
            ),
        ],
        responses={200: PlanSerializer, **errors(400, 404)},
    )
    def get(self, request, slug):
        project = visible_project(request.user, slug)
        seed = whole_number_param(request, "seed", maximum=SEED_MAX)
        spec = spec_in(project, request.query_params.get("spec"))
        return Response(plan_for(project, spec=spec, seed=seed))
