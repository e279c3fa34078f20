"""Error pages: an API caller gets the API's JSON error format even from the URL resolver;
a locked-out login gets a page saying when it may try again."""

from django.conf import settings
from django.http import JsonResponse
from django.shortcuts import render
from django.utils import timezone
from django.views import defaults


def not_found(request, exception=None):
    if request.path.startswith("/api/"):
        return JsonResponse(
            {"detail": "not found, or not in one of your projects", "code": "not_found"}, status=404
        )
    return defaults.page_not_found(request, exception)


def server_error(request):
    if request.path.startswith("/api/"):
        return JsonResponse(
            {"detail": "the server failed; nothing was changed", "code": "server_error"}, status=500
        )
    return defaults.server_error(request)


def locked_out(request, original_response=None, credentials=None):
    """django-axes' answer to a refused login: when the lock ends and who can end it sooner.

    The wait restarts with every failed try (axes' default), so it is counted from now.
    """
    minutes = int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
    context = {
        "minutes": minutes,
        "until": timezone.now() + settings.AXES_COOLOFF_TIME,
        "limit": settings.AXES_FAILURE_LIMIT,
    }
    return render(request, "registration/locked_out.html", context, status=429)
