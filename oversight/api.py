"""The manager's view in the API: a project's plan and what its work cost.

- ``GET /api/v1/projects/{slug}/plan/``: its unfinished tasks as a dependency graph, the
  cycles, the critical path and a forecast (``oversight.plan``). Members.
- ``GET /api/v1/projects/{slug}/costs/``: what the work cost, as the agents reported it
  (``oversight.costs``). Managers.

Both only read; the paths, names and schema are the ones they had in ``tasks``.
"""

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from oversight.costs import TASKS_SHOWN, cost_figures
from oversight.dashboard import window_start
from oversight.plan import SEED_MAX, plan_for, spec_in
from projects.rest import errors, whole_number_param
from projects.roles import Role
from projects.selectors import visible_project
from projects.services import require_role
from tasks.models import TaskState

# --- The plan -------------------------------------------------------------------------------

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


# --- Costs ------------------------------------------------------------------------------------

DEFAULT_WEEKS = 12
MAX_WEEKS = 520  # ten years


def amount_field(help_text: str = "", **kwargs):
    return serializers.DecimalField(
        max_digits=24, decimal_places=6, help_text=help_text or "US dollars, six places.", **kwargs
    )


class UsageSerializer(serializers.Serializer):
    attempts = serializers.IntegerField()
    cost_usd = amount_field("reported_cost_usd + priced_cost_usd, US dollars, six places.")
    reported_cost_usd = amount_field("What the agents reported as their cost.")
    priced_cost_usd = amount_field(
        "What the project's price table priced, for tokens reported without a cost."
    )
    cost_source = serializers.CharField(
        help_text='"reported", "priced", "reported + priced" or "none": where cost_usd came from.'
    )
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    wall_seconds = amount_field("Seconds, six places.")


class WorkerCostSerializer(UsageSerializer):
    reviewed = serializers.IntegerField(
        help_text="Attempts that reached a reviewer's verdict (approved or rejected)."
    )
    first_pass = serializers.IntegerField(
        help_text="Of those, approved with every gate run passed at its first try."
    )
    first_pass_rate = serializers.FloatField(
        allow_null=True, help_text="first_pass / reviewed; null when nothing was reviewed."
    )


class AgentCostSerializer(WorkerCostSerializer):
    agent = serializers.CharField(source="name", help_text="The agent's username.")


class ModelCostSerializer(WorkerCostSerializer):
    model = serializers.CharField(source="name", help_text='As reported; "unknown model" if not.')


class SpecCostSerializer(UsageSerializer):
    spec = serializers.CharField(
        source="key", allow_null=True, help_text="null: tasks without one."
    )
    title = serializers.CharField(source="name")
    tasks = serializers.IntegerField()


class TaskCostSerializer(UsageSerializer):
    task = serializers.CharField(source="key")
    title = serializers.CharField(source="name")
    state = serializers.ChoiceField(choices=TaskState.choices)
    spec = serializers.CharField(allow_null=True)


class CostsSerializer(serializers.Serializer):
    project = serializers.CharField()
    self_reported = serializers.BooleanField(
        help_text="Always true: every figure is what the agents reported (Attempt.usage)."
    )
    weeks = serializers.IntegerField()
    window_start = serializers.DateTimeField(help_text="Monday 00:00 of the oldest week.")
    window_end = serializers.DateTimeField()
    total = UsageSerializer(help_text="Every attempt started in the window.")
    reported = serializers.IntegerField(help_text="Attempts that reported a cost at all.")
    approved_tasks = serializers.IntegerField()
    landed_tasks = serializers.IntegerField()
    cost_per_approved_task = amount_field(
        "The window's whole cost / approved_tasks.", allow_null=True
    )
    cost_per_landed_task = amount_field("The window's whole cost / landed_tasks.", allow_null=True)
    agents = AgentCostSerializer(many=True, help_text="Most expensive first.")
    models = ModelCostSerializer(many=True, help_text="Most expensive first.")
    specs = SpecCostSerializer(many=True, help_text="Most expensive first.")
    tasks = TaskCostSerializer(many=True, help_text=f"The {TASKS_SHOWN} most expensive.")
    tasks_total = serializers.IntegerField(help_text="Tasks with an attempt in the window.")


class ProjectCostsApi(APIView):
    """What a project's work cost, as its agents reported it, per task, spec, agent and
    model, with the cost per approved and landed task and the first-pass rate (managers;
    ``oversight.costs.cost_figures``)."""

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "weeks",
                {"type": "integer", "minimum": 1, "maximum": MAX_WEEKS},
                description="The last ISO weeks to count, this one included (default 12).",
            )
        ],
        responses={200: CostsSerializer, **errors(400, 403, 404)},
    )
    def get(self, request, slug):
        project = visible_project(request.user, slug)
        require_role(request.user, project.pk, Role.MANAGER)
        weeks = whole_number_param(request, "weeks") or DEFAULT_WEEKS
        if weeks > MAX_WEEKS:
            raise serializers.ValidationError({"weeks": [f"at most {MAX_WEEKS}"]})
        now = timezone.now()
        figures = cost_figures(project_ids=[project.pk], start=window_start(weeks, now), end=now)
        return Response(CostsSerializer({**figures, "project": project.slug, "weeks": weeks}).data)
