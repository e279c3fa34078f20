"""The webhooks API: a project's subscriptions and their delivery logs (managers)."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from events import services
from events.models import Format
from events.selectors import delivery_of, managed_project, subscription_of
from events.types import TYPES
from projects.rest import IdCursorPagination, JSONInputSerializer, NewestFirstPagination, errors


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


TYPE_HELP = f"Event types wanted (empty: all; `task.*`: a noun's): {', '.join(TYPES)}."


class SubscriptionListApi(APIView):
    """A project's webhook subscriptions; a new one answers its signing secret, once."""

    class InputSerializer(JSONInputSerializer):
        reject_unknown_fields = True
        url = serializers.CharField(
            max_length=2000,
            help_text="http(s) URL; for format commit-status, with {sha} where the commit goes.",
        )
        types = serializers.ListField(
            child=serializers.CharField(max_length=40), required=False, help_text=TYPE_HELP
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

    @extend_schema(responses={200: SubscriptionSerializer(many=True), **errors(403, 404)})
    def get(self, request, slug):
        project = managed_project(request.user, slug)
        page = IdCursorPagination()
        rows = page.paginate_queryset(project.subscriptions.all(), request, view=self)
        return page.get_paginated_response(SubscriptionSerializer(rows, many=True).data)

    @extend_schema(
        request=InputSerializer,
        responses={201: NewSubscriptionSerializer, **errors(400, 403, 404, 409)},
    )
    def post(self, request, slug):
        project = managed_project(request.user, slug)
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        subscription = services.subscription_create(
            project=project, actor=request.user, **data.validated_data
        )
        return Response(NewSubscriptionSerializer(subscription).data, status=201)


class SubscriptionDetailApi(APIView):
    """Read, change (target, types, format, token, on or off) or remove a subscription."""

    class InputSerializer(JSONInputSerializer):
        reject_unknown_fields = True
        url = serializers.CharField(max_length=2000, required=False)
        types = serializers.ListField(
            child=serializers.CharField(max_length=40), required=False, help_text=TYPE_HELP
        )
        format = serializers.ChoiceField(choices=Format.values, required=False)
        description = serializers.CharField(max_length=200, required=False, allow_blank=True)
        token = serializers.CharField(max_length=500, required=False, allow_blank=True)
        context = serializers.CharField(max_length=100, required=False)
        active = serializers.BooleanField(required=False)

    @extend_schema(responses={200: SubscriptionSerializer, **errors(403, 404)})
    def get(self, request, slug, pk):
        subscription = subscription_of(managed_project(request.user, slug), pk)
        return Response(SubscriptionSerializer(subscription).data)

    @extend_schema(
        request=InputSerializer, responses={200: SubscriptionSerializer, **errors(400, 403, 404)}
    )
    def patch(self, request, slug, pk):
        subscription = subscription_of(managed_project(request.user, slug), pk)
        data = self.InputSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        subscription = services.subscription_update(
            subscription=subscription, actor=request.user, **data.validated_data
        )
        return Response(SubscriptionSerializer(subscription).data)

    @extend_schema(responses={204: None, **errors(403, 404)})
    def delete(self, request, slug, pk):
        subscription = subscription_of(managed_project(request.user, slug), pk)
        services.subscription_delete(subscription=subscription, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class DeliveryListApi(APIView):
    """A subscription's delivery log, newest first: status, answer code, tries, next try."""

    @extend_schema(responses={200: DeliverySerializer(many=True), **errors(403, 404)})
    def get(self, request, slug, pk):
        subscription = subscription_of(managed_project(request.user, slug), pk)
        page = NewestFirstPagination()
        rows = page.paginate_queryset(subscription.deliveries.all(), request, view=self)
        return page.get_paginated_response(DeliverySerializer(rows, many=True).data)


class DeliveryRedeliverApi(APIView):
    """Send a delivery again, with the same webhook-id."""

    @extend_schema(request=None, responses={202: DeliverySerializer, **errors(400, 403, 404)})
    def post(self, request, slug, pk, delivery):
        subscription = subscription_of(managed_project(request.user, slug), pk)
        found = delivery_of(subscription, delivery)
        found = services.delivery_redeliver(delivery=found, actor=request.user)
        return Response(DeliverySerializer(found).data, status=202)
