"""The decision log, decision records and spec pages of the review UI."""

import markdown
import nh3
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_POST

from decisions import services
from decisions.forms import DecisionFilterForm, VerdictForm
from decisions.models import Decision, Spec, SpecVersion
from decisions.selectors import (
    body_diff,
    criteria_changes,
    decision_impact,
    search_decisions,
    supersession_chain,
)
from projects.errors import ServiceError, refusal_text
from projects.models import Event, Project
from projects.numbers import query_number
from projects.pages import is_htmx, may
from projects.selectors import project_ids_for

PAGE_SIZE = 50


def _visible(user):
    return Decision.objects.filter(project_id__in=project_ids_for(user))


@login_required
def decision_log(request):
    """Every decision of the user's projects: search, filters, supersession chains."""
    form = DecisionFilterForm(request.GET)
    form.is_valid()
    data = getattr(form, "cleaned_data", {})
    decisions = _visible(request.user)
    if data.get("project"):
        decisions = decisions.filter(project__slug=data["project"])
    if data.get("state"):
        decisions = decisions.filter(state=data["state"])
    if data.get("spec"):
        decisions = decisions.filter(specs__key=data["spec"])
    if data.get("since"):
        decisions = decisions.filter(decided_at__date__gte=data["since"])
    if data.get("until"):
        decisions = decisions.filter(decided_at__date__lte=data["until"])
    decisions = (
        decisions.order_by("-number")
        if not data.get("q")
        else search_decisions(decisions, data["q"])
    )
    decisions = decisions.select_related("project", "proposed_by", "decided_by").prefetch_related(
        "supersedes", "superseded_by", "specs", "tasks", "amendments__spec"
    )
    page = Paginator(decisions, PAGE_SIZE).get_page(query_number(request, "page"))
    projects = Project.objects.filter(pk__in=project_ids_for(request.user)).order_by("slug")
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "decisions/log.html",
        {
            "page": page,
            "form": form,
            "projects": projects,
            "query": query.urlencode(),
            "nav": "decisions",
        },
    )


def _decision_or_404(user, key) -> Decision:
    try:
        return (
            _visible(user)
            .select_related("project", "proposed_by", "decided_by", "proposed_in__task")
            .prefetch_related(
                "supersedes",
                "superseded_by",
                "specs",
                "tasks",
                "amendments__spec",
                "amended_versions__spec",
            )
            .get(key=key)
        )
    except Decision.DoesNotExist:
        raise Http404(f"No decision {key} in your projects") from None


@login_required
def decision_detail(request, key):
    decision = _decision_or_404(request.user, key)
    earlier, later = supersession_chain(decision)
    events = Event.objects.filter(
        content_type=ContentType.objects.get_for_model(Decision), object_id=decision.pk
    ).select_related("actor")
    return render(
        request,
        "decisions/detail.html",
        {
            "decision": decision,
            "earlier": earlier,
            "later": later,
            "events": events,
            "impact": decision_impact(decision),
            "can_accept": may(decision, "accept", request.user),
            "can_reject": may(decision, "reject", request.user),
            "nav": "decisions",
        },
    )


@login_required
@require_POST
def decision_verdict(request, key, verdict):
    decision = _decision_or_404(request.user, key)
    service = {"accept": services.decision_accept, "reject": services.decision_reject}.get(verdict)
    if service is None:
        raise Http404("No such verdict")
    form = VerdictForm(request.POST)
    form.is_valid()
    error = None
    try:
        service(decision=decision, actor=request.user, reason=form.cleaned_data.get("reason", ""))
    except (ServiceError, ValidationError) as exc:
        error = refusal_text(exc)
    if is_htmx(request):
        decision = _decision_or_404(request.user, key)
        return render(
            request,
            "decisions/partials/decision_row.html",
            {"decision": decision, "error": error, "can_decide": True},
        )
    if error:
        messages.error(request, f"{decision.key} not {verdict}ed: {error}")
    else:
        messages.success(request, f"{decision.key} {verdict}ed.")
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = f"/decisions/{decision.key}/"
    return redirect(target)


def render_markdown(text: str) -> str:
    """Spec bodies are Markdown written by people: rendered, then sanitised."""
    html = markdown.markdown(text, extensions=["fenced_code", "tables"])
    return mark_safe(nh3.clean(html))  # nh3 keeps only safe tags and attributes


@login_required
def spec_detail(request, key):
    """A spec with every version, and the difference between any two."""
    try:
        spec = (
            Spec.objects.filter(project_id__in=project_ids_for(request.user))
            .select_related("project")
            .get(key=key)
        )
    except Spec.DoesNotExist:
        raise Http404(f"No spec {key} in your projects") from None
    versions = list(
        SpecVersion.objects.filter(spec=spec)
        .select_related("author", "source_decision")
        .prefetch_related("criteria")
        .order_by("number")
    )
    by_number = {v.number: v for v in versions}
    current = next(
        (v for v in versions if v.state == "accepted"), versions[-1] if versions else None
    )

    def pick(name, default):
        return by_number.get(query_number(request, name), default)

    shown = pick("v", current)
    left = pick("a", versions[-2] if len(versions) > 1 else None)
    right = pick("b", versions[-1] if versions else None)
    diff, changes, unchanged = [], [], []
    if left and right and left != right:
        diff = body_diff(left.body, right.body, f"v{left.number}", f"v{right.number}")
        changes, unchanged = criteria_changes(left, right)
    return render(
        request,
        "decisions/spec.html",
        {
            "spec": spec,
            "versions": versions,
            "shown": shown,
            "body": render_markdown(shown.body) if shown else "",
            "left": left,
            "right": right,
            "diff": diff,
            "criteria_changes": changes,
            "criteria_unchanged": unchanged,
            "tasks": spec.tasks.order_by("number")[:100],
            "nav": "decisions",
        },
    )
