"""The webhook pages (managers), and the live stream ``GET /api/v1/events/stream``.

The stream is Server-Sent Events from an async view: it needs the ASGI app
(``uvicorn factory_site.asgi:application``, as ``make run`` serves the site). Under WSGI
it answers 501 saying so rather than hold a worker thread per client.
"""

import asyncio
import contextlib
import json
import logging
import time
from importlib import import_module
from types import SimpleNamespace

from django.conf import settings
from django.contrib import auth, messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.handlers.asgi import ASGIRequest
from django.http import Http404, JsonResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods
from rest_framework.exceptions import AuthenticationFailed

from events import services
from events.forms import SubscriptionEditForm, SubscriptionForm
from events.models import Delivery, Subscription
from events.stream import Client, _closing, hub, read_after
from events.types import TYPES, unknown
from projects.auth import BearerTokenAuthentication
from projects.errors import ServiceError, refusal_text
from projects.models import Project
from projects.pages import managed_project
from projects.roles import Role
from projects.selectors import project_ids_for

log = logging.getLogger(__name__)

# --- The live stream -------------------------------------------------------------------


def _error(detail: str, code: str, status: int, **extra) -> JsonResponse:
    return JsonResponse({"detail": detail, "code": code, **extra}, status=status)


def _credential(request) -> tuple[str, str]:
    """What the caller signed in with, to be checked again while its stream is open:
    ``("token", the bearer token)`` or ``("session", the session's key)``."""
    header = request.META.get("HTTP_AUTHORIZATION", "")
    if header.startswith("Bearer "):
        return "token", header.removeprefix("Bearer ").strip()
    return "session", request.session.session_key or ""


def _user(credential: tuple[str, str]):
    """The credential's user while it stands — a live token, or a session still signed
    in, of an active user — else None."""
    kind, value = credential
    if kind == "token":
        try:
            user, _ = BearerTokenAuthentication().authenticate_credentials(value.encode())
        except AuthenticationFailed:
            return None
        return user
    if not value:
        return None
    # A fresh read of the session: the request's copy is the one it arrived with.
    session = import_module(settings.SESSION_ENGINE).SessionStore(value)
    user = auth.get_user(SimpleNamespace(session=session))
    return user if user.is_authenticated and user.is_active else None


def _projects(credential: tuple[str, str]) -> set[int] | None:
    """The ids of the credential's user's projects now, or None when it no longer stands."""
    user = _user(credential)
    return None if user is None else set(project_ids_for(user))


def _project_id(slug: str, ids: set[int]) -> int | None:
    return Project.objects.filter(slug=slug, pk__in=ids).values_list("pk", flat=True).first()


def _who(request):
    """``(user, ids of the user's projects)``; the user is None when not signed in."""
    credential = _credential(request)
    if credential[0] == "token":
        user, _ = BearerTokenAuthentication().authenticate_credentials(credential[1].encode())
    else:
        user = request.user
        if not user.is_authenticated:
            return None, set()
    return user, set(project_ids_for(user))


async def stream(request):
    """Server-Sent Events of the caller's projects, filtered by ``project`` and ``types``,
    resumable with ``Last-Event-ID`` (or ``?last_event_id=``).

    At most ``FACTORY_STREAM_MAX_PER_USER`` open streams per user and web process (429
    ``too_many_streams`` past it). While open, the credential and memberships are
    checked again at least every ``FACTORY_STREAM_HEARTBEAT`` seconds: the stream ends
    when the token or session is gone or expired or the user is inactive, and stops
    carrying the projects its user has left.
    """
    if not isinstance(request, ASGIRequest):
        response = _error(
            "the live stream is served by the ASGI app: uvicorn factory_site.asgi:application",
            "stream_needs_asgi",
            501,
        )
        # The documented answer, not a server error: django.request would log it as one.
        response._has_been_logged = True
        log.info("live stream asked of the WSGI app: answered 501 stream_needs_asgi")
        return response
    try:
        user, ids = await _closing(_who)(request)
    except AuthenticationFailed:
        return _error("Invalid token.", "authentication_failed", 401)
    if user is None:
        return _error("Authentication credentials were not provided.", "not_authenticated", 401)
    slug = request.GET.get("project", "")
    if slug:
        pid = await _closing(_project_id)(slug, ids)
        if pid is None:
            return _error(f"no project {slug} among yours", "not_found", 404)
        ids = {pid}
    types = [t.strip() for t in request.GET.get("types", "").split(",") if t.strip()]
    if strangers := unknown(types):
        return _error(
            f"unknown event types: {', '.join(strangers)}",
            "invalid",
            400,
            fields={"types": [f"choose from {', '.join(TYPES)}"]},
        )
    last = request.headers.get("Last-Event-ID") or request.GET.get("last_event_id") or ""
    if last and not (last.isascii() and last.isdigit()):
        return _error(
            "Last-Event-ID is an event id",
            "invalid",
            400,
            fields={"last_event_id": ["a whole number"]},
        )
    most = settings.FACTORY_STREAM_MAX_PER_USER
    # Counted and joined with no await between: two opening at once cannot both pass.
    if hub().streams_of(user.pk) >= most:
        return _error(
            f"{user.get_username()} has {most} live streams open, the most a user may;"
            " close one first",
            "too_many_streams",
            429,
        )
    # Joined, and the hub listening, before the answer starts: a client that has the
    # response's headers misses nothing from then on.
    client = Client(ids, types, user_id=user.pk)
    hub().join(client)
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(hub().listening.wait(), 10)
    except BaseException:  # the caller went away meanwhile: its stream never starts
        hub().leave(client)
        raise
    response = StreamingHttpResponse(
        _frames(client, int(last) if last else None, _credential(request)),
        content_type="text/event-stream",
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
    return response


def frame(event_id: int, payload: dict) -> str:
    return f"id: {event_id}\nevent: {payload['type']}\ndata: {json.dumps(payload)}\n\n"


CLOSED = ": closed: the credential is no longer valid\n\n"


async def _frames(client: Client, last: int | None, credential: tuple[str, str]):
    client.task = asyncio.current_task()
    heartbeat = settings.FACTORY_STREAM_HEARTBEAT
    try:
        yield "retry: 2000\n: connected\n\n"
        sent = last or 0
        if last is not None:
            for event_id, project_id, payload in await _closing(read_after)(
                last, client.project_ids
            ):
                if client.wants(project_id, payload):
                    sent = max(sent, event_id)
                    yield frame(event_id, payload)
        checked = time.monotonic()
        while True:
            try:
                item = await asyncio.wait_for(client.queue.get(), heartbeat)
            except TimeoutError:
                item = None
            # Every heartbeat, and before an event once a heartbeat has passed (a busy
            # stream never times out): is the credential still good, which projects now?
            if item is None or time.monotonic() - checked >= heartbeat:
                ids = await _closing(_projects)(credential)
                if ids is None:
                    yield CLOSED
                    return
                client.project_ids = client.project_ids & ids
                checked = time.monotonic()
            if item is None:
                yield ": heartbeat\n\n"
                continue
            event_id, project_id, payload = item
            if last is not None and event_id <= sent:
                continue  # already sent from the backlog
            if client.wants(project_id, payload):  # its projects as last checked
                yield frame(event_id, payload)
    finally:
        hub().leave(client)


# --- Pages -----------------------------------------------------------------------------

TOKEN_CLEARED = (
    "The URL changed, so its token was cleared: enter the token again if the new URL needs one."
)


@login_required
def webhooks_index(request):
    """The projects the user manages, each with its subscriptions."""
    projects = Project.objects.filter(pk__in=project_ids_for(request.user, Role.MANAGER))
    projects = projects.order_by("slug").prefetch_related("subscriptions")
    return render(request, "events/index.html", {"projects": projects, "nav": "webhooks"})


@login_required
@require_http_methods(["GET", "POST"])
def webhooks(request, slug):
    """A project's subscriptions and a form for a new one; its secret is shown once."""
    project = managed_project(request.user, slug)
    created = None
    form = SubscriptionForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            created = services.subscription_create(
                project=project, actor=request.user, **form.cleaned_data
            )
        except (ValidationError, ServiceError) as exc:
            _form_errors(form, exc)
        else:
            messages.success(request, "Subscribed. Copy the secret now: it is not shown again.")
            form = SubscriptionForm()
    rows = project.subscriptions.all()
    response = render(
        request,
        "events/webhooks.html",
        {"project": project, "rows": rows, "form": form, "created": created, "nav": "webhooks"},
    )
    response["Cache-Control"] = "no-store"  # the answer to a POST shows the secret
    return response


@login_required
@require_http_methods(["GET", "POST"])
def webhook(request, slug, pk):
    """One subscription: change it, turn it on or off, remove it, read its delivery log
    and redeliver."""
    project = managed_project(request.user, slug)
    subscription = Subscription.objects.filter(project=project, pk=pk).first()
    if subscription is None:
        raise Http404("no such webhook")
    form = SubscriptionEditForm(
        request.POST if request.POST.get("action") == "edit" else None,
        initial={
            "url": subscription.url,
            "description": subscription.description,
            "format": subscription.format,
            "types": subscription.types,
            "context": subscription.context,
            "active": subscription.active,
        },
    )
    if request.method == "POST":
        action = request.POST.get("action")
        try:
            if action == "delete":
                services.subscription_delete(subscription=subscription, actor=request.user)
                messages.success(request, "Webhook removed.")
                return redirect("webhooks", slug=project.slug)
            if action == "redeliver":
                delivery = Delivery.objects.filter(
                    subscription=subscription, pk=request.POST.get("delivery") or 0
                ).first()
                if delivery is None:
                    raise Http404("no such delivery")
                services.delivery_redeliver(delivery=delivery, actor=request.user)
                messages.success(request, f"Delivery {delivery.webhook_id} queued again.")
                return redirect("webhook", slug=project.slug, pk=subscription.pk)
            if action == "edit" and form.is_valid():
                changes = dict(form.cleaned_data)
                if not changes["token"]:
                    changes.pop("token")
                saved = services.subscription_update(
                    subscription=subscription, actor=request.user, **changes
                )
                messages.success(request, "Webhook saved.")
                if saved.token_cleared:
                    messages.warning(request, TOKEN_CLEARED)
                return redirect("webhook", slug=project.slug, pk=subscription.pk)
        except (ValidationError, ServiceError) as exc:
            if action == "edit":
                _form_errors(form, exc)
            else:
                messages.error(request, refusal_text(exc))
    deliveries = subscription.deliveries.select_related("event")[:100]
    return render(
        request,
        "events/webhook.html",
        {
            "project": project,
            "subscription": subscription,
            "form": form,
            "deliveries": deliveries,
            "nav": "webhooks",
        },
    )


def _form_errors(form, exc) -> None:
    if isinstance(exc, ValidationError) and hasattr(exc, "message_dict"):
        for field, problems in exc.message_dict.items():
            form.add_error(field if field in form.fields else None, problems)
    else:
        form.add_error(None, refusal_text(exc))
