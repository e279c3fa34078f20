"""The site's side of the metrics (projects.metrics defines them): the /metrics endpoint
and the middleware that counts and times every request."""

import hmac
import time

from django.conf import settings
from django.http import Http404, HttpResponse
from django.utils import timezone

from evidence.selectors import gate_run_figures
from landing.selectors import metric_figures as landing_figures
from projects import metrics as instruments
from tasks.selectors import metric_figures


def metrics(request):
    """The Prometheus text, for a caller with ``Authorization: Bearer <FACTORY_METRICS_TOKEN>``.

    Anyone else, and everyone while the setting is unset, gets the site's 404, as for an
    address that does not exist. No session or login is involved: the token is compared in
    constant time, so the answer's timing tells nothing of how much of a guess was right.
    """
    token = settings.FACTORY_METRICS_TOKEN
    given = request.headers.get("Authorization", "")
    if not token or not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        raise Http404("no such page")
    now = timezone.now()
    figures = {**metric_figures(now=now), **gate_run_figures(now=now), **landing_figures(now=now)}
    return HttpResponse(instruments.render(figures), content_type=instruments.CONTENT_TYPE)


class RequestMetricsMiddleware:
    """Counts every request by its route's name, method and status, and times it.

    The route is the URL pattern's name (``api-task-claim``), never the path: a key or id
    in the path would make a series per task. An address no pattern matches is
    ``unmatched``.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        response = self.get_response(request)
        match = request.resolver_match
        instruments.request_answered(
            route=match.view_name if match else "unmatched",
            method=request.method,
            status=response.status_code,
            seconds=time.perf_counter() - started,
        )
        return response
