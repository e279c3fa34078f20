"""The projects part of the API: your projects, your roles in them, and their settings."""

from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import generics, serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from projects import hosts, prices, services, verify
from projects.access import Writers
from projects.models import Project
from projects.policy import registry
from projects.rest import IdCursorPagination, JSONInputSerializer, budget_field, errors
from projects.roles import MANAGER, roles_in
from projects.selectors import project_ids_for, visible_project


def _verify_schema() -> dict:
    """The verify block as ``projects.verify.clean_verify`` takes it: {} or the whole block."""
    command = {"type": "string", "pattern": verify.COMMAND_PATTERN, "maxLength": verify.MAX_COMMAND}
    path = {"type": "string", "pattern": verify.REPORT_PATH_PATTERN, "maxLength": verify.MAX_PATH}
    limits = {
        name: {"type": "integer", "minimum": low, "maximum": high}
        for name, (low, high) in verify.verify_bounds().items()
    }
    block = {
        "type": "object",
        "properties": {
            "setup": {"type": "array", "items": command, "maxItems": verify.MAX_SETUP},
            "test": command,
            "junit": path,
            "coverage": {**path, "nullable": True},
            **limits,
            "setup_network": {"type": "boolean"},
            "cache_keys": {
                "type": "array",
                "items": {**path, "pattern": verify.CACHE_KEY_PATTERN},
                "maxItems": verify.MAX_CACHE_KEYS,
            },
        },
        "required": ["test", "junit"],
        "additionalProperties": False,
    }
    return {
        "description": (
            "How the runner verifies each submission at its commit ({} for no runner): setup "
            "commands, the test command (sh -c, never with the network), where it writes "
            "JUnit and Cobertura, its limits, and the lock files that choose its dependency cache. "
            "See docs/runner.md."
        ),
        "anyOf": [{"type": "object", "maxProperties": 0}, block],
    }


@extend_schema_field(_verify_schema())
class VerifyField(serializers.DictField):
    """``projects.verify.clean_verify`` checks it and fills in the defaults."""


@extend_schema_field(
    {"type": "string", "pattern": f"^$|{verify.REPOSITORY_PATTERN}", "maxLength": verify.MAX_URL}
)
class RepositoryField(serializers.CharField):
    """``projects.verify.clean_repository_url`` checks it against the same pattern."""


@extend_schema_field(
    {"type": "string", "pattern": verify.BRANCH_PATTERN, "maxLength": verify.MAX_BRANCH}
)
class BranchField(serializers.CharField):
    """``projects.verify.clean_branch`` checks it against the same pattern."""


def _landing_schema() -> dict:
    """The landing block as ``projects.verify.clean_landing`` takes it."""
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "mode": {"type": "string", "enum": list(verify.LANDING_MODES)},
            "method": {"type": "string", "enum": list(verify.LANDING_METHODS)},
            **{
                name: {"type": "integer", "minimum": low, "maximum": high}
                for name, (low, high) in verify.LANDING_NUMBERS.items()
            },
            "target_branch": {
                "type": "string",
                "pattern": f"^$|{verify.BRANCH_PATTERN}",
                "maxLength": verify.MAX_BRANCH,
            },
        },
    }


@extend_schema_field(prices.schema())
class PricesField(serializers.JSONField):
    """``projects.prices.clean_prices`` checks it against the same schema."""


@extend_schema_field(_landing_schema())
class LandingField(serializers.JSONField):
    """``projects.verify.clean_landing`` checks it and fills in the defaults."""


def _code_host_schema() -> dict:
    """The code host block as ``projects.hosts.clean_code_host`` takes it: none, or GitHub
    with a token, or GitHub with an App; credentials by variable name only."""
    env = {"type": "string", "pattern": hosts.ENV_PATTERN}
    number = {"type": "integer", "minimum": 1, "maximum": hosts.GITHUB_ID_MAX}
    github = {
        "provider": {"type": "string", "enum": ["github"]},
        "api_url": {"type": "string", "enum": hosts.api_urls()},
        "repository": {"type": "string", "pattern": hosts.REPOSITORY_PATTERN},
        "webhook_secret_env": env,
        "issues": {
            "type": "object",
            "nullable": True,
            "additionalProperties": False,
            "required": ["label"],
            "properties": {
                "label": {
                    "type": "string",
                    "pattern": hosts.LABEL_PATTERN,
                    "maxLength": hosts.LABEL_MAX,
                }
            },
        },
    }
    shared = ["provider", "repository", "webhook_secret_env"]
    return {
        "oneOf": [
            {
                "type": "object",
                "additionalProperties": False,
                "properties": {"provider": {"type": "string", "enum": ["none"]}},
            },
            {
                "type": "object",
                "additionalProperties": False,
                "required": [*shared, "token_env"],
                "properties": {**github, "token_env": env},
            },
            {
                "type": "object",
                "additionalProperties": False,
                "required": [*shared, "app_id", "installation_id", "private_key_env"],
                "properties": {
                    **github,
                    "app_id": number,
                    "installation_id": number,
                    "private_key_env": env,
                },
            },
        ]
    }


@extend_schema_field(_code_host_schema())
class CodeHostField(serializers.JSONField):
    """``projects.hosts.clean_code_host`` checks it; it names secrets, never holds one."""


class ProjectSerializer(serializers.Serializer):
    slug = serializers.CharField(read_only=True)
    name = serializers.CharField(read_only=True)
    repository_url = serializers.CharField(read_only=True)
    default_branch = serializers.CharField(read_only=True)
    verify = VerifyField(read_only=True)
    max_attempts = serializers.IntegerField(read_only=True)
    gate_policy = serializers.DictField(child=serializers.DictField(), read_only=True)
    landing = LandingField(source="landing_settings", read_only=True)
    code_host = CodeHostField(read_only=True)
    claim_avoid_overlap = serializers.BooleanField(read_only=True, allow_null=True)
    budget_usd = serializers.DecimalField(
        max_digits=12,
        decimal_places=2,
        read_only=True,
        allow_null=True,
        help_text="What its attempts may cost per calendar month (UTC), by self-reported "
        "usage; null: no limit.",
    )
    prices = PricesField(
        read_only=True,
        help_text="Model → US dollars per million input, output, cache_read, cache_write "
        "tokens and set_on (YYYY-MM-DD): prices usage reported without a cost.",
    )
    my_roles = serializers.SerializerMethodField()

    def get_my_roles(self, project) -> list[str]:
        return sorted(roles_in(self.context["request"].user, project.pk))


class ProjectListApi(generics.ListAPIView):
    """Your projects, with your roles in each."""

    serializer_class = ProjectSerializer
    pagination_class = IdCursorPagination

    def get_queryset(self):
        return Project.objects.filter(pk__in=project_ids_for(self.request.user))

    @extend_schema(responses={200: ProjectSerializer(many=True), **errors(400, 404)})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


def _gate_policy_schema() -> dict:
    """The registered gates (``FACTORY_GATES``, ``FACTORY_EXTRA_GATES``) and their parameters."""
    types = {bool: "boolean", int: "integer", float: "number", str: "string"}
    bounds = {("coverage", "threshold"): {"minimum": 0, "maximum": 1}}
    gates = {}
    for name, gate in sorted(registry().items()):
        params = {
            param: {
                **({"type": types[kind]} if kind in types else {}),
                "default": default,
                **bounds.get((name, param), {}),
            }
            for param, (kind, default) in gate.params.items()
        }
        gates[name] = {
            "type": "object",
            "nullable": True,
            "properties": params,
            "additionalProperties": False,
            "description": gate.description,
        }
    return {"type": "object", "properties": gates, "additionalProperties": False}


@extend_schema_field(_gate_policy_schema())
class GatePolicyField(serializers.DictField):
    """``projects.policy.clean_policy`` checks the names and parameters."""


class ProjectDetailApi(APIView):
    """Read a project, or change its name, repository, runner, attempt budget, gate policy
    or landing (the merge queue).

    Changes are for managers; the runner gate in the policy needs a repository and a
    verify block, and landing mode push needs both and the runner.
    """

    writers = Writers(MANAGER)

    def write_target(self, request, slug):
        return visible_project(request.user, slug)

    class InputSerializer(JSONInputSerializer):
        read_only_from = ProjectSerializer
        name = serializers.CharField(max_length=200, required=False)
        repository_url = RepositoryField(
            max_length=verify.MAX_URL,
            required=False,
            allow_blank=True,
            trim_whitespace=False,
            help_text="What git fetches: https://, ssh://, git://, file:///, a path, user@host:path.",
        )
        default_branch = BranchField(
            max_length=verify.MAX_BRANCH, required=False, trim_whitespace=False
        )
        verify = VerifyField(required=False)
        max_attempts = serializers.IntegerField(required=False, min_value=1, max_value=100)
        gate_policy = GatePolicyField(
            child=serializers.DictField(allow_null=True),
            required=False,
            help_text='Gates to run, with parameters: {"coverage": {"threshold": 0.8}}.',
        )
        landing = LandingField(
            required=False,
            help_text="The merge queue: mode off|push, method squash|merge, batch_max 1-16, "
            "target_branch (empty: the default branch).",
        )
        code_host = CodeHostField(
            required=False,
            help_text="Where the code lives: {provider: none} or {provider: github, api_url "
            "(one the operator allows), repository: owner/name, token_env or app_id, "
            "installation_id and private_key_env, webhook_secret_env, issues: {label} or "
            "null}. Credentials are names of the server's FACTORY_HOST_ variables. At save "
            "the site asks the host: 409 code_host_permissions lists each permission the "
            "credentials lack in `missing`; 503 code_host_unavailable when the host cannot "
            "be asked; either way nothing is saved.",
        )
        claim_avoid_overlap = serializers.BooleanField(
            required=False,
            allow_null=True,
            help_text="Claims prefer tasks whose allowed_paths overlap no task in progress, "
            "in review or queued to land; null: on when landing is on.",
        )
        budget_usd = budget_field(services.PROJECT_BUDGET_DIGITS)(
            required=False,
            help_text="What its attempts may cost per calendar month (UTC), by their agents' "
            "self-reported usage; past it a claim is 409 budget_exhausted. Null: no limit.",
        )
        prices = PricesField(
            required=False,
            help_text='The whole price table: {"model": {"input": "3.00", "output": "15.00", '
            '"cache_read": "0.30", "cache_write": "3.75", "set_on": "2026-12-01"}}, US dollars '
            "per million tokens; usage an agent reports without a cost is priced with it.",
        )

    @extend_schema(responses={200: ProjectSerializer, **errors(404)})
    def get(self, request, slug):
        project = visible_project(request.user, slug)
        return Response(ProjectSerializer(project, context={"request": request}).data)

    @extend_schema(
        request=InputSerializer, responses={200: ProjectSerializer, **errors(400, 403, 404, 409)}
    )
    def patch(self, request, slug):
        project = self.target
        data = self.InputSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        project = services.project_update(
            project=project, actor=request.user, **data.validated_data
        )
        return Response(ProjectSerializer(project, context={"request": request}).data)
