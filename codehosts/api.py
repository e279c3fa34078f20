"""The code-host part of the API: which of the host's accounts is which member (issue 33)."""

from django.contrib.auth import get_user_model
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from codehosts import identities
from codehosts.models import HostAccount
from projects.access import Writers
from projects.rest import IdCursorPagination, JSONInputSerializer, errors
from projects.roles import MANAGER
from projects.selectors import visible_project

User = get_user_model()


class HostAccountSerializer(serializers.ModelSerializer):
    user = serializers.CharField(source="user.username", help_text="The member it is.")
    linked_by = serializers.CharField(
        source="linked_by.username",
        allow_null=True,
        default=None,
        help_text="The manager who linked it (null: no longer a user).",
    )

    class Meta:
        model = HostAccount
        fields = ["host_id", "login", "user", "linked_by", "linked_at"]
        extra_kwargs = {
            "host_id": {"help_text": "The host's number for the account: a rename keeps it."},
            "login": {"help_text": "Its login on the host when last seen."},
        }


class ManagersWrite:
    """A write for the project's managers, checked before the body is read."""

    writers = Writers(MANAGER)

    def write_target(self, request, slug, **_):
        return visible_project(request.user, slug)


class HostAccountListApi(ManagersWrite, generics.ListAPIView):
    """The host's accounts linked to members of the project (members read); a manager links
    one (``codehosts.identities.host_account_link``): the host is asked for the login's
    number, which the link keeps, so a renamed login still finds the member. An Event.

    400 naming ``login`` (not a GitHub login, or no account on the host) or ``user`` (not
    a member of the project); 409 ``host_account_linked`` when the account is another
    member's already, ``code_host_unconfigured`` without a usable code host; 503
    ``code_host_unavailable`` when the host cannot be asked."""

    serializer_class = HostAccountSerializer
    pagination_class = IdCursorPagination

    class InputSerializer(JSONInputSerializer):
        login = serializers.RegexField(
            regex=identities.LOGIN_PATTERN,
            max_length=identities.LOGIN_MAX,
            help_text="The account's login on the host, as it is now: letters, digits and "
            "single hyphens, neither first nor last.",
        )
        user = serializers.CharField(
            max_length=150, help_text="The username of a member of the project."
        )

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema generator's call
            return HostAccount.objects.none()
        project = visible_project(self.request.user, self.kwargs["slug"])
        return HostAccount.objects.filter(project=project).select_related("user", "linked_by")

    @extend_schema(responses={200: HostAccountSerializer(many=True), **errors(400, 404)})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(
        request=InputSerializer,
        responses={200: HostAccountSerializer, **errors(400, 403, 404, 409, 503)},
    )
    def post(self, request, slug):
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        account = identities.host_account_link(
            actor=request.user,
            project=self.target,
            login=data.validated_data["login"],
            user=User.objects.filter(username=data.validated_data["user"]).first(),
        )
        return Response(HostAccountSerializer(account).data)


class HostAccountDetailApi(ManagersWrite, APIView):
    """A manager takes a link back (``codehosts.identities.host_account_unlink``): the
    account is shown as its login on the host again. An Event. 404 for an account not
    linked in the project."""

    @extend_schema(responses={204: None, **errors(403, 404)})
    def delete(self, request, slug, host_id):
        identities.host_account_unlink(actor=request.user, project=self.target, host_id=host_id)
        return Response(status=204)
