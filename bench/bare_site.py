"""A one-file Django site whose only view claims with one UPDATE in a transaction.

bench/claim.py serves it with gunicorn beside the real site, to show the floor that
Django, gunicorn and the database set for any claim endpoint on this machine.
"""

import os

import dj_database_url
from common import BARE_CLAIM
from django.db import connection, transaction
from django.http import HttpResponse, JsonResponse
from django.urls import path

DEBUG = False
SECRET_KEY = "bench"
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = __name__
DATABASES = {"default": dj_database_url.parse(os.environ["DATABASE_URL"], conn_max_age=600)}
INSTALLED_APPS = []
MIDDLEWARE = []
USE_TZ = True


def claim(request, slug):
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(BARE_CLAIM, [slug])
        row = cursor.fetchone()
    if row is None:
        return HttpResponse(status=204)
    return JsonResponse({"id": row[0], "key": row[1]}, status=201)


urlpatterns = [path("claim/<str:slug>/", claim)]

from django.core.wsgi import get_wsgi_application  # noqa: E402

application = get_wsgi_application()
