"""The real site with two more endpoints whose only work is the bare claim UPDATE:
a plain Django view behind the site's middleware, and a DRF view behind the same
middleware plus token authentication and throttles.

bench/claim.py serves it (``DJANGO_SETTINGS_MODULE=floor_site``) to separate what the
middleware and the framework cost from what the claim itself costs (the real endpoint).
"""

from common import BARE_CLAIM
from django.db import connection, transaction
from django.http import HttpResponse, JsonResponse
from django.urls import include, path
from django.views.decorators.csrf import csrf_exempt
from rest_framework.response import Response
from rest_framework.views import APIView

from projects.access import Writers
from tasks.models import AGENT


def bare_claim(slug: str) -> tuple | None:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(BARE_CLAIM, [slug])
        return cursor.fetchone()


@csrf_exempt
def middleware_claim(request, slug):
    row = bare_claim(slug)
    if row is None:
        return HttpResponse(status=204)
    return JsonResponse({"id": row[0], "key": row[1]}, status=201)


class FloorClaim(APIView):
    # Every write of the API starts from the same check as the claim's (projects.access).
    writers = Writers(AGENT, project_field="project")

    def post(self, request, slug):
        row = bare_claim(slug)
        if row is None:
            return Response(status=204)
        return Response({"id": row[0], "key": row[1]}, status=201)


urlpatterns = [
    path("floor/claim/<str:slug>/", FloorClaim.as_view()),
    path("middleware/claim/<str:slug>/", middleware_claim),
    path("", include("factory_site.urls")),
]
