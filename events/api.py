"""The webhooks API: a project's subscriptions and their delivery logs (managers)."""

from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import generics, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from events import services, targets
from events.models import Delivery, Format, Subscription
from events.selectors import delivery_of, managed_project, subscription_of
from events.types import TYPES, WILDCARDS
from projects.access import Writers
from projects.rest import (
    EditInputMixin,
    IdCursorPagination,
    JSONInputSerializer,
    NewestFirstPagination,
    NoInputSerializer,
    errors,
)
from projects.roles import MANAGER
from projects.selectors import visible_project


class SubscriptionSerializer(serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    url = serializers.CharField(read_only=True)
    description = serializers.CharField(read_only=True)
    format = serializers.CharField(read_only=True)
    types = serializers.ListField(child=serializers.CharField(), read_only=True)
    context = serializers.CharField(read_only=True)
    active = serializers.BooleanField(read_only=True)
    disabled_reason = serializers.CharField(read_only=True)
    failing_since = serializers.DateTimeField(read_only=True, allow_null=True)
    has_token = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField(read_only=True)

    def get_has_token(self, subscription) -> bool:
        return bool(subscription.token)


class NewSubscriptionSerializer(SubscriptionSerializer):
    secret = serializers.CharField(
        read_only=True, help_text="The signing secret (whsec_…). Shown this once; keep it."
    )


class UpdatedSubscriptionSerializer(SubscriptionSerializer):
    token_cleared = serializers.BooleanField(
        read_only=True,
        help_text="The URL changed and no token came with it, so the stored token was"
        " cleared: send it again if the new URL needs one.",
    )


class DeliverySerializer(serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    webhook_id = serializers.CharField(read_only=True)
    event = serializers.IntegerField(source="event_id", read_only=True)
    type = serializers.CharField(read_only=True)
    status = serializers.CharField(read_only=True)
    tries = serializers.IntegerField(read_only=True)
    last_code = serializers.IntegerField(read_only=True, allow_null=True)
    last_error = serializers.CharField(read_only=True)
    last_try_at = serializers.DateTimeField(read_only=True, allow_null=True)
    next_try_at = serializers.DateTimeField(read_only=True, allow_null=True)
    delivered_at = serializers.DateTimeField(read_only=True, allow_null=True)
    created_at = serializers.DateTimeField(read_only=True)
    payload = serializers.DictField(read_only=True)


TYPE_HELP = "Event types wanted; none: all; `task.*`: every type of a noun."
TYPE_CHOICES = [*TYPES, *WILDCARDS]
URL_HELP = "http(s) URL. For commit-status: {sha} where the commit goes (else it is appended)."


@extend_schema_field(
    {"type": "string", "pattern": targets.URL_PATTERN, "maxLength": targets.MAX_URL}
)
class TargetField(serializers.CharField):
    """``events.targets.refusal`` checks it against the same pattern (and the network)."""


TOKEN_EDIT_HELP = "Bearer token sent with commit statuses. A new url without it clears it."


# What a manager writes of a webhook subscription, each field declared once: required as at
# its creation (SubscriptionListApi); an edit (SubscriptionDetailApi) requires none and may
# also switch it on or off. (No docstrings: drf-spectacular would show them on the schemas.)
class SubscriptionInput(JSONInputSerializer):
    read_only_from = NewSubscriptionSerializer
    url = TargetField(max_length=targets.MAX_URL, help_text=URL_HELP)
    types = serializers.ListField(
        child=serializers.ChoiceField(choices=TYPE_CHOICES),
        required=False,
        max_length=len(TYPE_CHOICES),
        help_text=TYPE_HELP,
    )
    format = serializers.ChoiceField(choices=Format.values, required=False)
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)
    token = serializers.CharField(
        max_length=500,
        required=False,
        allow_blank=True,
        help_text="Bearer token sent with commit statuses; never shown again.",
    )
    context = serializers.CharField(max_length=100, required=False)


class ManagedProjectWrite:
    """A write on a project's webhooks: for its managers, checked before the body is read
    (``projects.access``); the view finds the project as ``self.target``."""

    writers = Writers(MANAGER)

    def write_target(self, request, slug, **_):
        return visible_project(request.user, slug)


class SubscriptionListApi(ManagedProjectWrite, generics.ListAPIView):
    """A project's webhook subscriptions; a new one answers its signing secret, once."""

    serializer_class = SubscriptionSerializer
    pagination_class = IdCursorPagination

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema generator's call
            return Subscription.objects.none()
        return managed_project(self.request.user, self.kwargs["slug"]).subscriptions.all()

    class InputSerializer(SubscriptionInput):
        pass

    @extend_schema(responses={200: SubscriptionSerializer(many=True), **errors(400, 403, 404)})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(
        request=InputSerializer,
        responses={201: NewSubscriptionSerializer, **errors(400, 403, 404, 409)},
    )
    def post(self, request, slug):
        project = self.target
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        subscription = services.subscription_create(
            project=project, actor=request.user, **data.validated_data
        )
        return Response(NewSubscriptionSerializer(subscription).data, status=201)


class SubscriptionDetailApi(ManagedProjectWrite, APIView):
    """Read, change (target, types, format, token, on or off) or remove a subscription.

    A new URL without a token clears the stored one (``token_cleared`` in the answer)."""

    class InputSerializer(EditInputMixin, SubscriptionInput):
        edit_help = {"token": TOKEN_EDIT_HELP}
        active = serializers.BooleanField(required=False)

    @extend_schema(responses={200: SubscriptionSerializer, **errors(403, 404)})
    def get(self, request, slug, pk):
        subscription = subscription_of(managed_project(request.user, slug), pk)
        return Response(SubscriptionSerializer(subscription).data)

    @extend_schema(
        request=InputSerializer,
        responses={200: UpdatedSubscriptionSerializer, **errors(400, 403, 404)},
    )
    def patch(self, request, slug, pk):
        subscription = subscription_of(self.target, pk)
        data = self.InputSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        subscription = services.subscription_update(
            subscription=subscription, actor=request.user, **data.validated_data
        )
        return Response(UpdatedSubscriptionSerializer(subscription).data)

    @extend_schema(responses={204: None, **errors(403, 404)})
    def delete(self, request, slug, pk):
        subscription = subscription_of(self.target, pk)
        services.subscription_delete(subscription=subscription, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class DeliveryListApi(generics.ListAPIView):
    """A subscription's delivery log, newest first: status, answer code, tries, next try."""

    serializer_class = DeliverySerializer
    pagination_class = NewestFirstPagination

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema generator's call
            return Delivery.objects.none()
        project = managed_project(self.request.user, self.kwargs["slug"])
        return subscription_of(project, self.kwargs["pk"]).deliveries.all()

    @extend_schema(responses={200: DeliverySerializer(many=True), **errors(400, 403, 404)})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


class DeliveryRedeliverApi(ManagedProjectWrite, APIView):
    """Send a delivery again, with the same webhook-id."""

    @extend_schema(
        request=NoInputSerializer, responses={202: DeliverySerializer, **errors(400, 403, 404)}
    )
    def post(self, request, slug, pk, delivery):
        subscription = subscription_of(self.target, pk)
        NoInputSerializer(data=request.data).is_valid(raise_exception=True)
        found = delivery_of(subscription, delivery)
        found = services.delivery_redeliver(delivery=found, actor=request.user)
        return Response(DeliverySerializer(found).data, status=202)
