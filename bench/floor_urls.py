"""The real site with one more endpoint: a DRF view, behind the real middleware, token
authentication and throttles, whose only work is the bare claim UPDATE.

bench/claim.py serves it (``DJANGO_SETTINGS_MODULE=floor_site``) to separate what the
framework costs (this view) from what the claim itself costs (the real endpoint).
"""

from common import BARE_CLAIM
from django.db import connection, transaction
from django.urls import include, path
from rest_framework.response import Response
from rest_framework.views import APIView


class FloorClaim(APIView):
    def post(self, request, slug):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(BARE_CLAIM, [slug])
            row = cursor.fetchone()
        if row is None:
            return Response(status=204)
        return Response({"id": row[0], "key": row[1]}, status=201)


urlpatterns = [
    path("floor/claim/<str:slug>/", FloorClaim.as_view()),
    path("", include("factory_site.urls")),
]
