"""The agent contract for attempts: the claim (``/api/v1/tasks/claim/``) and everything
the lease holder does within its attempt (``/api/v1/attempts/…``): heartbeat, checkpoint,
submit, release, evidence and proposed decisions; and the attempt's own page of gate runs,
runner and review verdict.

Views validate input at the edge and call one service (``tasks.attempts``); services own
permissions, locks and state. Every object is looked up through the caller's memberships,
so another project's attempt is a 404.
"""

from django.conf import settings
from django.db.models import prefetch_related_objects
from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.exceptions import ParseError
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from decisions import api as decision_api
from evidence import api as evidence_api
from evidence import services as evidence_services
from evidence.models import Kind
from evidence.selectors import measured_run
from evidence.uploads import HashingUploadHandler
from projects import metrics
from projects.access import Writers
from projects.errors import ServiceError, TooLarge
from projects.rest import (
    NON_BLANK_TEXT,
    TEXT,
    JSONInputSerializer,
    KnownFieldsSerializer,
    errors,
    usd_schema,
    validated_by,
)
from projects.roles import HOLDER, MANAGER, Role, either, role_rule
from projects.selectors import project_for
from tasks import attempts, selectors
from tasks.api import TaskSerializer, reason_schema
from tasks.landing import LANDING_STATES
from tasks.models import AGENT, AttemptState
from tasks.review import applied_text
from tasks.usage import (
    COST_DIGITS,
    MAX_MODEL,
    MAX_MODELS,
    MAX_SECONDS,
    MAX_TOKENS,
    shown_with_void,
)

# --- Output -------------------------------------------------------------------------------


class SpecVersionRefSerializer(serializers.Serializer):
    spec = serializers.CharField(source="spec.key")
    number = serializers.IntegerField()


@extend_schema_field(
    {
        "type": "object",
        "nullable": True,
        "description": "Where its approved change is in landing (the merge queue), or null "
        "when it never joined it. docs/landing.md.",
        "properties": {
            "state": {"type": "string", "enum": list(LANDING_STATES)},
            "commit": {"type": "string", "description": "The approved commit."},
            "batch": {"type": "integer", "nullable": True},
            "landed": {"type": "string", "description": "The commit that carries it."},
            "reason": {"type": "string"},
            "seconds": {"type": "number"},
        },
    }
)
class LandingField(serializers.JSONField):
    """The attempt's ``landing`` block; null when it never joined the queue."""

    def to_representation(self, value):
        return value or None


USAGE_FIGURES = {
    "model": {"type": "string", "nullable": True, "description": "The last model reported."},
    "models": {"type": "array", "items": {"type": "string"}},
    "input_tokens": {"type": "integer", "minimum": 0},
    "output_tokens": {"type": "integer", "minimum": 0},
    "cache_read_tokens": {"type": "integer", "minimum": 0},
    "cache_write_tokens": {"type": "integer", "minimum": 0},
    "cost_usd": {
        "type": "string",
        "description": 'What the agent reported, US dollars, a decimal string ("0.42").',
    },
    "priced_cost_usd": {
        "type": "string",
        "description": "What the project's price table priced for the models whose cost the "
        "agent did not report; the budgets count both.",
    },
    "wall_seconds": {"type": "number", "minimum": 0},
    "by_model": {
        "type": "object",
        "description": "Per model: the token counts, cost_usd (reported, or null) and "
        "priced_cost_usd (priced while none was reported, or null).",
        "additionalProperties": {"type": "object"},
    },
    "self_reported": {"type": "boolean", "enum": [True]},
}
USAGE_SHOWN = {"type": "object", "properties": USAGE_FIGURES, "required": list(USAGE_FIGURES)}
USAGE_TOTALS = {
    **USAGE_SHOWN,
    "description": "What the attempt used, summed over its heartbeats and submit, as its "
    "agent reported it (self_reported: always true; never verified); what counts toward "
    "the budgets and the cost views. docs/api.md, Usage.",
    "properties": {
        **USAGE_FIGURES,
        "voided": {
            "type": "object",
            "nullable": True,
            "description": "null, or the void of what the attempt had reported until a "
            "manager voided it: kept as reported, counted nowhere.",
            "properties": {
                "by": {"type": "string", "description": "The manager who voided it."},
                "at": {"type": "string", "format": "date-time"},
                "reason": {"type": "string"},
                "usage": {**USAGE_SHOWN, "description": "The totals voided."},
            },
            "required": ["by", "at", "reason", "usage"],
        },
    },
    "required": [*USAGE_FIGURES, "voided"],
}


@extend_schema_field(USAGE_TOTALS)
class UsageTotalsField(serializers.JSONField):
    """The attempt's usage totals and its void (the field's source is the attempt)."""

    def __init__(self, **kwargs):
        super().__init__(source="*", **kwargs)

    def to_representation(self, value):
        return shown_with_void(value.usage, value.usage_voided)


USAGE_REPORT = {
    "type": "object",
    "nullable": True,
    "additionalProperties": False,
    "description": "What you used since your last report (an increment: it is added to the "
    "attempt's totals once). Every field is optional. docs/api.md, Usage.",
    "properties": {
        "model": {"type": "string", "maxLength": MAX_MODEL, "pattern": NON_BLANK_TEXT},
        "input_tokens": {"type": "integer", "minimum": 0, "maximum": MAX_TOKENS},
        "output_tokens": {"type": "integer", "minimum": 0, "maximum": MAX_TOKENS},
        "cache_read_tokens": {"type": "integer", "minimum": 0, "maximum": MAX_TOKENS},
        "cache_write_tokens": {"type": "integer", "minimum": 0, "maximum": MAX_TOKENS},
        "cost_usd": {
            **usd_schema(COST_DIGITS, at_most=settings.FACTORY_USAGE_MAX_REPORT_USD),
            "description": f"US dollars, at most {settings.FACTORY_USAGE_MAX_REPORT_USD} in "
            "one report (FACTORY_USAGE_MAX_REPORT_USD; decimals past the sixth are cut).",
        },
        "wall_seconds": {"type": "number", "minimum": 0, "maximum": MAX_SECONDS},
        "by_model": {
            "type": "object",
            "maxProperties": MAX_MODELS,
            "description": "The report broken down per model (each with any of the token "
            "counts and cost_usd); the sums above, when given, hold at least it, and what "
            "they hold beyond it is `model`'s.",
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "input_tokens": {"type": "integer", "minimum": 0, "maximum": MAX_TOKENS},
                    "output_tokens": {"type": "integer", "minimum": 0, "maximum": MAX_TOKENS},
                    "cache_read_tokens": {"type": "integer", "minimum": 0, "maximum": MAX_TOKENS},
                    "cache_write_tokens": {
                        "type": "integer",
                        "minimum": 0,
                        "maximum": MAX_TOKENS,
                    },
                    "cost_usd": usd_schema(
                        COST_DIGITS, at_most=settings.FACTORY_USAGE_MAX_REPORT_USD
                    ),
                },
            },
        },
    },
}


@extend_schema_field(USAGE_REPORT)
class UsageReportField(serializers.Field):
    """The report as sent; ``tasks.usage.clean_usage`` reads it in the service and names
    ``usage.<field>`` when refusing, before anything changes."""

    def __init__(self, **kwargs):
        kwargs.setdefault("required", False)
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        return data


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
    landing = LandingField(read_only=True)
    usage = UsageTotalsField(read_only=True)


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


# --- Input helpers ------------------------------------------------------------------------


class ChangeSerializer(JSONInputSerializer):
    commit = serializers.RegexField(
        r"^([0-9a-fA-F]{40}|[0-9a-fA-F]{64})$",
        required=False,
        help_text="The commit's full object id (40 hex digits, or 64 in a SHA-256 "
        "repository): a short id or a name can come to mean another commit.",
        error_messages={
            "invalid": "the commit's full object id: 40 hex digits (64 in a SHA-256 "
            "repository), as `git rev-parse HEAD` prints it; a short id or a branch name "
            "can come to mean another commit"
        },
    )

    def validate_commit(self, value: str) -> str:
        return value.lower()

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


# --- Claiming -----------------------------------------------------------------------------


class ClaimSerializer(serializers.Serializer):
    task = TaskSerializer()
    attempt = AttemptSerializer()
    skipped_for_overlap = serializers.ListField(
        child=serializers.CharField(),
        help_text="Better-placed tasks passed over because their allowed_paths overlap work "
        "in progress, in review or queued to land (claim_avoid_overlap).",
    )


# The claim's answer, written by one serializer built once (and its input read by one,
# ``CLAIM_INPUT``): a serializer made per request deep-copies every declared field of
# itself and its nested ones before it writes a value, three quarters of the answer's
# cost. Writing and validating change nothing on a serializer, so one instance serves
# every request and thread.
CLAIM_ANSWER = ClaimSerializer()


class TaskClaimApi(APIView):
    """Claim the best claimable task under a lease: 201 with the task and attempt, 204 if none."""

    writers = Writers(AGENT, project_field="project")

    def check_permissions(self, request):
        try:
            super().check_permissions(request)
        except ServiceError as exc:  # refused for its role: a refused claim all the same
            metrics.claim_refused(exc.code)
            raise

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
        responses={201: ClaimSerializer, 204: None, **errors(400, 403, 404, 409)},
    )
    def post(self, request):
        fields = validated_by(CLAIM_INPUT, request.data)
        project = project_for(request.user, fields["project"]) if fields.get("project") else None
        attempt = attempts.task_claim(
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
        answer = {
            "task": task,
            "attempt": attempt,
            "skipped_for_overlap": getattr(attempt, "skipped_for_overlap", []),
        }
        return Response(CLAIM_ANSWER.to_representation(answer), status=status.HTTP_201_CREATED)


CLAIM_INPUT = TaskClaimApi.InputSerializer()


# --- Attempts -----------------------------------------------------------------------------


# The service asks for a reason only when blocking (after checking who may do it, so a
# refusal for role or state comes first); one object per case says so exactly.
RELEASE_REQUEST = {
    "oneOf": [
        {
            "type": "object",
            "properties": {
                "reason": reason_schema(TEXT, "Why the task is given back."),
                "blocked": {"type": "boolean", "enum": [False], "default": False},
            },
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {
                "reason": reason_schema(NON_BLANK_TEXT, "What blocks the task, for the manager."),
                "blocked": {"type": "boolean", "enum": [True]},
            },
            "required": ["reason", "blocked"],
            "additionalProperties": False,
        },
    ]
}


class AttemptWriteApi(APIView):
    """A write on the attempt in the URL: ``writers`` is checked on it before the body is
    read (the lease holder, unless a view says otherwise), and the view finds it as
    ``self.target``."""

    writers = Writers(HOLDER)

    def write_target(self, request, attempt_id, **_):
        return selectors.attempt_for(request.user, attempt_id)


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


class AttemptHeartbeatApi(AttemptWriteApi):
    """Extend the lease, reporting usage. 409 lease_lost once it has run out; 409
    budget_exhausted when the usage reached the task's budget (the attempt has ended)."""

    class InputSerializer(JSONInputSerializer):
        lease_seconds = LeaseSecondsField(required=False)
        usage = UsageReportField()

    @extend_schema(
        request=InputSerializer, responses={200: LeaseSerializer, **errors(400, 403, 404, 409)}
    )
    def post(self, request, attempt_id):
        attempt = self.target
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        attempt = attempts.attempt_heartbeat(
            attempt=attempt,
            actor=request.user,
            lease_seconds=data.validated_data.get("lease_seconds"),
            usage=data.validated_data.get("usage"),
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


class AttemptCheckpointApi(AttemptWriteApi):
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
        attempt = self.target
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        attempt = attempts.attempt_checkpoint_save(
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


class AttemptSubmitApi(AttemptWriteApi):
    """Submit for checking; send an ``Idempotency-Key`` header so a retry is safe."""

    class InputSerializer(JSONInputSerializer):
        summary = serializers.CharField(
            max_length=10_000, help_text="What changed and why, for the reviewer."
        )
        change = ChangeSerializer(required=False, default=dict)
        usage = UsageReportField()

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
        attempt = self.target
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        key = request.headers.get("Idempotency-Key", "").strip()
        if len(key) > 255:
            raise serializers.ValidationError({"Idempotency-Key": "at most 255 characters"})
        attempt = attempts.attempt_submit(
            attempt=attempt,
            actor=request.user,
            summary=data.validated_data["summary"],
            change=dict(data.validated_data["change"]),
            idempotency_key=key,
            usage=data.validated_data.get("usage"),
        )
        status_url = reverse("api-attempt", kwargs={"attempt_id": attempt.pk})
        answer = {**attempt.submit_receipt, "status_url": status_url}
        return Response(answer, status=status.HTTP_202_ACCEPTED)


class AttemptReleaseApi(AttemptWriteApi):
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
        attempt = self.target
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        attempt = attempts.attempt_release(
            attempt=attempt, actor=request.user, **data.validated_data
        )
        return Response(AttemptSerializer(attempt).data)


class AttemptUsageVoidApi(AttemptWriteApi):
    """Void the usage the attempt's agent has reported so far (managers of its project):
    kept on the attempt as reported, counted toward no budget and no cost view from now.
    409 invalid_state when already voided, nothing_to_void when nothing was reported."""

    writers = Writers(MANAGER)

    class InputSerializer(JSONInputSerializer):
        reason = serializers.CharField(
            max_length=10_000, help_text="Why this usage should not count."
        )

    @extend_schema(
        request=InputSerializer, responses={200: AttemptSerializer, **errors(400, 403, 404, 409)}
    )
    def post(self, request, attempt_id):
        attempt = self.target
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        attempt = attempts.attempt_usage_void(
            attempt=attempt, actor=request.user, reason=data.validated_data["reason"]
        )
        return Response(AttemptSerializer(attempt).data)


class AttemptDecisionCreateApi(AttemptWriteApi):
    """Propose a decision during your attempt (the lease holder only)."""

    @extend_schema(
        request=decision_api.DecisionInputSerializer,
        responses={201: decision_api.DecisionSerializer, **errors(400, 403, 404, 409)},
    )
    def post(self, request, attempt_id):
        attempt = self.target
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


class AttemptEvidenceApi(AttemptWriteApi):
    """Attach a file to an attempt (the lease holder: agent evidence; a verifier: authoritative)."""

    parser_classes = [MultiPartParser]
    writers = Writers(
        either(
            HOLDER,
            role_rule(Role.VERIFIER, Role.REVIEWER, Role.MANAGER),
            refusal=(
                "permission_denied",
                "only the agent holding the attempt, or a verifier, reviewer or manager of"
                " the project, may attach evidence",
            ),
        )
    )

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
        attempt = self.target
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
