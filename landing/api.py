"""The merge queue's API: a project's landing queue, batches and lander (members), a
manager taking a task out of the queue (``landing.services.landing_dequeue``), waking a
lander that backs off (``landing.services.landing_retry``), and pausing and resuming the
landing (``landing_pause``, ``landing_resume``), and reverting a landed change
(``landing.services.revert_request``) or taking a queued revert back (``revert_cancel``;
docs/landing.md)."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from landing import selectors
from landing.models import BatchState, LanderState
from landing.services import (
    landing_dequeue,
    landing_fast,
    landing_pause,
    landing_quarantine,
    landing_resume,
    landing_retry,
    revert_cancel,
    revert_request,
)
from projects.access import Writers
from projects.api import LandingField
from projects.rest import JSONInputSerializer, ReasonSerializer, RequiredReasonSerializer, errors
from projects.roles import MANAGER
from projects.selectors import visible_project
from tasks.api import TaskSerializer
from tasks.landing import LANDING_STATES
from tasks.models import Task, TaskState
from tasks.selectors import task_for

# --- Output ---------------------------------------------------------------------------------


class FastSerializer(serializers.Serializer):
    by = serializers.CharField(allow_null=True)
    reason = serializers.CharField()
    alone = serializers.BooleanField(help_text="It lands in a batch by itself.")
    at = serializers.DateTimeField()


class QueueRowSerializer(serializers.Serializer):
    position = serializers.IntegerField(help_text="1: the next to land.")
    task = serializers.CharField(source="task.key")
    title = serializers.CharField(source="task.title")
    attempt = serializers.IntegerField(source="attempt.pk")
    commit = serializers.CharField(help_text="The approved commit: what lands, never a branch.")
    queued_at = serializers.DateTimeField(allow_null=True)
    state = serializers.ChoiceField(
        choices=LANDING_STATES, help_text="queued, landing (in a batch now) or error."
    )
    batch = serializers.IntegerField(allow_null=True, help_text="The batch it is or was in.")
    reason = serializers.CharField(help_text="Why it is still waiting, after an error.")
    lane = serializers.ChoiceField(
        choices=["fast", "normal"], help_text="fast: a manager put it first (landing_fast)."
    )
    fast = FastSerializer(allow_null=True, help_text="Who put it in the fast lane and why.")


class RevertRowSerializer(serializers.Serializer):
    task = serializers.CharField(source="task.key")
    title = serializers.CharField(source="task.title")
    reverts = serializers.CharField(help_text="The landed commit the revert takes out.")
    by = serializers.CharField(allow_null=True, help_text="The manager who asked for it.")
    reason = serializers.CharField()
    asked_at = serializers.DateTimeField()
    state = serializers.ChoiceField(
        choices=["queued", "landing", "error"],
        help_text="queued, landing (in a batch now) or error (the machine's trouble: it waits).",
    )
    why = serializers.CharField(help_text="Why it is still waiting, after an error.")
    lane = serializers.ChoiceField(
        choices=["fast", "normal"], help_text="fast: a manager put it first (landing_fast)."
    )


# A test's id as ``landing.services.landing_quarantine`` takes it (after the trim): one line,
# no control character, something that is not whitespace.
TEST_ID = (
    r"^[^\u0000-\u001f\u007f]*"
    r"[^\u0000-\u0020\u007f\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
    r"[^\u0000-\u001f\u007f]*$"
)
CHANGE_DEFAULTS = {"built": "", "outcome": "queued", "reason": ""}


class BatchChangeSerializer(serializers.Serializer):
    attempt = serializers.IntegerField()
    task = serializers.CharField()
    commit = serializers.CharField(help_text="The approved commit.")
    built = serializers.CharField(help_text="The commit on the chain that carries it.")
    outcome = serializers.CharField(
        help_text="landed, conflict, failed, or queued (still waiting); in a revert's batch, "
        "reverted when the revert landed."
    )
    reason = serializers.CharField()

    def to_representation(self, instance):
        # A batch's changes are written as they happen: one cut short has no outcome yet.
        return super().to_representation({**CHANGE_DEFAULTS, **instance})


class BatchSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    state = serializers.ChoiceField(choices=BatchState.choices)
    target = serializers.CharField()
    base = serializers.CharField(help_text="The target's tip it was built on.")
    result = serializers.CharField(help_text="The commit pushed (empty if none was).")
    changes = BatchChangeSerializer(many=True, help_text="In approval order.")
    verify_runs = serializers.IntegerField()
    bisect_steps = serializers.IntegerField()
    pushes = serializers.IntegerField()
    reruns = serializers.IntegerField(help_text="Runs repeated because the first failed.")
    flaky = serializers.ListField(
        child=serializers.CharField(), help_text="Tests that failed and then passed at one tree."
    )
    seconds = serializers.FloatField()
    started_at = serializers.DateTimeField()
    ended_at = serializers.DateTimeField(allow_null=True)
    reason = serializers.CharField()


class PauseSerializer(serializers.Serializer):
    by = serializers.CharField(allow_null=True, help_text="The manager who paused landing.")
    reason = serializers.CharField()
    since = serializers.DateTimeField()
    until = serializers.DateTimeField(
        allow_null=True, help_text="When the pause ends by itself; null: at a resume."
    )


class LanderSerializer(serializers.Serializer):
    state = serializers.ChoiceField(
        choices=LanderState.choices,
        help_text="ready: it lands whatever is queued when woken; backing_off: a batch erred, "
        "and it waits for the target's tip or the queue's head to change (or a manager's retry).",
    )
    reason = serializers.CharField(help_text="Why it backs off: the erring batch's reason.")
    since = serializers.DateTimeField(allow_null=True, help_text="When it began backing off.")
    tip = serializers.CharField(help_text="The target's tip the erring batch was built on.")
    head = serializers.CharField(allow_null=True, help_text="The task first in the queue then.")
    batch = serializers.IntegerField(allow_null=True, help_text="The batch that erred.")
    verified = serializers.BooleanField(
        help_text="It verified at that tip and head: it does not again until either changes."
    )
    wake_at = serializers.DateTimeField(
        allow_null=True, help_text="When it looks at the target again by itself."
    )
    paused = PauseSerializer(
        allow_null=True,
        help_text="A manager's pause: approvals queue, nothing lands until it ends. Null: "
        "not paused.",
    )


class FlakyTestSerializer(serializers.Serializer):
    test = serializers.CharField(help_text="The test's id, as its JUnit names it.")
    flakes = serializers.IntegerField(help_text="Trees at which it failed and then passed.")
    trees = serializers.ListField(child=serializers.CharField(), help_text="The last ones.")
    first_seen = serializers.DateTimeField(allow_null=True)
    last_seen = serializers.DateTimeField(allow_null=True)
    quarantined = serializers.BooleanField(
        help_text="Its failures neither block a landing nor blame a change (still shown)."
    )
    quarantined_at = serializers.DateTimeField(allow_null=True)
    quarantined_by = serializers.CharField(
        source="quarantined_by.username",
        allow_null=True,
        default=None,
        help_text="The manager who quarantined it; null: the project's rule did.",
    )
    reason = serializers.CharField(help_text="Why it is (or was last) quarantined.")
    passes = serializers.IntegerField(help_text="Runs passed in a row while quarantined.")


class FlakySerializer(serializers.Serializer):
    rate = serializers.FloatField(
        allow_null=True,
        help_text=f"Of the trees the last {selectors.FLAKE_RATE_BATCHES} batches judged, the "
        "share at which a test failed and then passed; null before any was judged.",
    )
    judged = serializers.IntegerField(help_text="Trees judged (runs less reruns).")
    flaked = serializers.IntegerField(help_text="Trees at which a test flaked.")
    count = serializers.IntegerField(help_text="Flaky or quarantined tests in all.")
    quarantined = serializers.IntegerField(help_text="Tests quarantined now.")
    tests = FlakyTestSerializer(
        many=True,
        help_text=f"Quarantined first, then the latest seen; the first {selectors.FLAKY_SHOWN}.",
    )


class LandingSerializer(serializers.Serializer):
    landing = LandingField(help_text="The project's landing settings, defaults filled in.")
    target = serializers.CharField(help_text="The branch changes land on.")
    lander = LanderSerializer(help_text="Whether the lander backs off, why and since when.")
    queue = QueueRowSerializer(
        many=True, help_text=f"In landing order; the first {selectors.QUEUE_SHOWN}."
    )
    queued = serializers.IntegerField(help_text="How many changes are queued in all.")
    reverts = RevertRowSerializer(
        many=True,
        help_text=f"Reverts of landed changes queued, in the order they land (each alone); "
        f"the first {selectors.REVERTS_SHOWN}.",
    )
    batches = BatchSerializer(
        many=True, help_text=f"The last {selectors.BATCHES_SHOWN}, newest first."
    )
    landed_per_hour = serializers.IntegerField(help_text="Changes landed in the last hour.")
    flaky = FlakySerializer(help_text="Flaky tests, the quarantine and the flake rate.")


# --- Views ----------------------------------------------------------------------------------


class ManagersWrite:
    """A write for the project's managers: the project in the URL fixes who may, checked
    before the body is read (``projects.access.Writers``); a task in it is looked up after."""

    writers = Writers(MANAGER)

    def write_target(self, request, slug, **_):
        return visible_project(request.user, slug)


class LandingApi(APIView):
    """A project's landing queue in landing order, its recent batches and its pace (members)."""

    @extend_schema(responses={200: LandingSerializer, **errors(404)})
    def get(self, request, slug):
        project = visible_project(request.user, slug)
        return Response(LandingSerializer(selectors.landing_overview(project)).data)


class LandingDequeueApi(ManagersWrite, APIView):
    """Take a task out of the landing queue (managers), with a reason: back to ``in_review``
    (its approval withdrawn) or to ``ready`` (a new attempt does the work again).

    409 ``invalid_state`` when the task is not queued, ``landing_in_progress`` while a
    batch is landing it."""

    # What the call takes. It is read leniently (ReadSerializer) so that a refusal for
    # state comes before what the body says (the service checks in that order).
    class InputSerializer(JSONInputSerializer):
        to = serializers.ChoiceField(
            choices=[TaskState.IN_REVIEW, TaskState.READY],
            help_text="in_review: reviewed again; ready: worked again by a new attempt.",
        )
        reason = serializers.CharField(max_length=10_000, help_text="Why it leaves the queue.")

    class ReadSerializer(JSONInputSerializer):
        to = serializers.CharField(required=False, allow_blank=True, default="")
        reason = serializers.CharField(
            max_length=10_000, required=False, allow_blank=True, default=""
        )

    @extend_schema(
        request=InputSerializer, responses={200: TaskSerializer, **errors(400, 403, 404, 409)}
    )
    def post(self, request, slug, key):
        task = selectors.task_in(self.target, key)
        data = self.ReadSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        landing_dequeue(task=task, actor=request.user, **data.validated_data)
        task = Task.objects.select_related("project", "spec").get(pk=task.pk)
        return Response(TaskSerializer(task).data)


class LandingFastApi(ManagersWrite, APIView):
    """Put a queued change at the head of the queue (managers), with a reason kept in the
    trail (an Event, ``fast_lane``; type ``landing.fast_lane``), alone in its batch if
    ``alone``. It is verified on the target as it is, like every change: the fast lane
    changes the order, never the checks. Answers the landing picture.

    409 ``invalid_state`` when the task has no change queued, ``landing_in_progress`` while a
    batch lands it, ``already_fast`` when it is in the fast lane already."""

    class InputSerializer(JSONInputSerializer):
        reason = serializers.CharField(
            max_length=10_000, help_text="Why it goes first (an incident, a release fix)."
        )
        alone = serializers.BooleanField(
            required=False, default=False, help_text="Land it in a batch by itself."
        )

    @extend_schema(
        request=InputSerializer, responses={200: LandingSerializer, **errors(400, 403, 404, 409)}
    )
    def post(self, request, slug, key):
        project = self.target
        task = selectors.task_in(project, key)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        landing_fast(task=task, actor=request.user, **data.validated_data)
        return Response(LandingSerializer(selectors.landing_overview(project)).data)


class LanderActApi(ManagersWrite, APIView):
    """A manager's act on the project's lander with an optional reason (``act``); answers
    the landing picture."""

    act = None  # the service, e.g. landing_retry

    @extend_schema(
        request=ReasonSerializer, responses={200: LandingSerializer, **errors(400, 403, 404, 409)}
    )
    def post(self, request, slug):
        project = self.target
        data = ReasonSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        self.act(project=project, actor=request.user, reason=data.validated_data["reason"])
        return Response(LandingSerializer(selectors.landing_overview(project)).data)


class LandingRetryApi(LanderActApi):
    """Wake the project's lander while it backs off (managers), with an optional reason: it
    forgets what failed and verifies the queue once more at once (an Event, ``retry``).

    409 ``not_backing_off`` when the lander is not backing off."""

    act = staticmethod(landing_retry)


class LandingPauseApi(ManagersWrite, APIView):
    """Pause the project's landing (managers), with a reason and, if given, when the pause
    ends by itself: approvals keep queueing, the lander starts no batch (one already
    pushing finishes). An Event, ``pause``.

    409 ``already_paused`` when landing is paused already."""

    class InputSerializer(JSONInputSerializer):
        reason = serializers.CharField(
            max_length=10_000, help_text="Why landing pauses: the page and the CLI show it."
        )
        until = serializers.DateTimeField(
            required=False,
            allow_null=True,
            default=None,
            help_text="When the pause ends by itself (a time still to come); none: at a resume.",
        )

    @extend_schema(
        request=InputSerializer, responses={200: LandingSerializer, **errors(400, 403, 404, 409)}
    )
    def post(self, request, slug):
        project = self.target
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        landing_pause(project=project, actor=request.user, **data.validated_data)
        return Response(LandingSerializer(selectors.landing_overview(project)).data)


class LandingResumeApi(LanderActApi):
    """Lift the project's pause (managers), with an optional reason: the lander is woken once
    and lands what queued meanwhile. An Event, ``unpause``.

    409 ``not_paused`` when landing is not paused."""

    act = staticmethod(landing_resume)


class LandingFlakyApi(ManagersWrite, APIView):
    """A project's flaky tests, its quarantine and its flake rate (members); a manager puts a
    test in quarantine with a reason, or releases it (``landing_quarantine``): a quarantined
    test's failures neither block a landing nor blame a change. An Event each.

    409 ``already_quarantined`` and ``not_quarantined``."""

    class InputSerializer(JSONInputSerializer):
        test = serializers.RegexField(
            regex=TEST_ID,
            max_length=500,
            help_text="The test's id, as its JUnit names it: one line, no control characters.",
        )
        quarantined = serializers.BooleanField(help_text="true: quarantine it; false: release it.")
        reason = serializers.CharField(
            max_length=10_000, help_text="Why it is quarantined or released: the page shows it."
        )

    @extend_schema(responses={200: FlakySerializer, **errors(404)})
    def get(self, request, slug):
        project = visible_project(request.user, slug)
        return Response(FlakySerializer(selectors.flaky_block(project)).data)

    @extend_schema(
        request=InputSerializer, responses={200: FlakyTestSerializer, **errors(400, 403, 404, 409)}
    )
    def post(self, request, slug):
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        row = landing_quarantine(project=self.target, actor=request.user, **data.validated_data)
        return Response(FlakyTestSerializer(row).data)


class _TaskRevertAction(APIView):
    """A manager's action on a task's revert, with a reason; answers the task."""

    writers = Writers(MANAGER)
    service = None  # the landing service that acts: (task=, actor=, reason=) -> Task

    def write_target(self, request, key):
        return task_for(request.user, key)

    @extend_schema(
        request=RequiredReasonSerializer,
        responses={200: TaskSerializer, **errors(400, 403, 404, 409)},
    )
    def post(self, request, key):
        data = ReasonSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        task = type(self).service(
            task=self.target, actor=request.user, reason=data.validated_data["reason"]
        )
        task = Task.objects.select_related("project", "spec").get(pk=task.pk)
        return Response(TaskSerializer(task).data)


class TaskRevertApi(_TaskRevertAction):
    """Revert a task's landed change (managers of its project), with a reason: the revert is
    queued like a change (in its turn, or first through the fast lane), built with ``git
    revert`` on the target as it is then, verified there and pushed by the lander. When it
    lands the task reopens (ready) with the reason in its next context, and the trail links
    the two commits (an Event ``revert``, type ``landing.reverted``); a revert that does not
    apply or fails its tests comes back with the reason, the task still done. Answers the
    task, still done until its revert lands.

    409 ``not_landed`` when the task's change is not on the target, ``landing_off`` when the
    project does not land through its lander, ``revert_queued`` when a revert is queued."""

    service = revert_request


class TaskRevertCancelApi(_TaskRevertAction):
    """Take back a task's queued revert (managers of its project), with a reason: it leaves
    the queue before the lander builds it, and the task stays done at its landed commit (an
    Event ``revert_cancelled``; the attempt's ``landing.revert`` is ``cancelled``, with who
    and why). A revert whose batch's lander died is settled first, as the next lander would.
    Answers the task. A cancelled revert can be asked again.

    409 ``no_revert_queued`` when no revert of the task is queued (saying what the task is),
    ``landing_in_progress`` when a live batch is landing the revert now."""

    service = revert_cancel
