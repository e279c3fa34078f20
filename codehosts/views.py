"""Webhooks in: ``/hooks/github/``. The host's delivery is checked and kept by
``codehosts.services.delivery_receive``; this view reads it off the wire and answers
at once (GitHub waits 10 seconds and counts a slower answer as a failed delivery)."""

import logging

from django.conf import settings
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt

from codehosts import services
from projects.errors import ServiceError

logger = logging.getLogger(__name__)


def _refused(status: int, detail: str, code: str) -> JsonResponse:
    return JsonResponse({"detail": detail, "code": code}, status=status)


@csrf_exempt  # the host signs its deliveries; it holds no session or CSRF cookie
def github(request):
    if request.method != "POST":
        response = _refused(405, "deliveries are POSTed", "method_not_allowed")
        response["Allow"] = "POST"
        return response
    content_type = request.content_type or ""
    if content_type != "application/json":
        return _refused(
            415,
            "the webhook's content type must be application/json (GitHub: the webhook's "
            '"Content type" setting)',
            "unsupported_media_type",
        )
    limit = settings.FACTORY_CODE_HOST_HOOK_MAX_BYTES
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    # Read off the stream, not request.body: a delivery may be larger than a request's
    # body elsewhere (FACTORY_MAX_BYTES), up to GitHub's own 25 MB.
    body = b"" if length > limit else request.read(limit + 1)
    if length > limit or len(body) > limit:
        return _refused(413, f"a delivery is at most {limit} bytes", "too_large")
    try:
        received = services.delivery_receive(
            event=request.headers.get("X-GitHub-Event", ""),
            delivery_id=request.headers.get("X-GitHub-Delivery", ""),
            signature=request.headers.get("X-Hub-Signature-256", ""),
            body=body,
        )
    except ServiceError as exc:
        return _refused(exc.status, exc.detail, exc.code)
    if received.delivery is None:
        return JsonResponse({"detail": "pong" if received.ping else "nothing to keep"}, status=200)
    answer = {"delivery": received.delivery.delivery_id, "event": received.delivery.event}
    if not received.new:
        return JsonResponse({**answer, "detail": "already received"}, status=200)
    return JsonResponse({**answer, "detail": "received"}, status=202)
