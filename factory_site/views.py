"""Error pages: an API caller gets the API's JSON error format even from the URL resolver."""

from django.http import JsonResponse
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
