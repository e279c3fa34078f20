"""The review UI for tasks: home, review queue, board, task page, tokens.

Every state change goes through the same service as the API; a refusal comes back
as a message on the page. Objects are reached through the user's memberships, so
another project's task is a 404.
"""

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ValidationError
from django.db.models import Count, IntegerField, OuterRef, Q, Subquery
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST
from knox.models import AuthToken

from decisions.models import DecisionState, SpecVersion
from evidence import viewers
from evidence.models import Evidence, GateRun, GateRunState, Kind
from evidence.responses import evidence_response
from evidence.selectors import criteria_status
from factory_site.numbers import query_number
from projects.errors import ServiceError
from projects.fsm import check
from projects.models import Event, Project
from projects.roles import Role, roles_by_project
from projects.selectors import project_ids_for
from projects.tokens import token_default_days, token_issue, token_max_days
from projects.tokens import token_revoke as token_revoke_service
from tasks import handoff, selectors, services
from tasks.forms import (
    STATE_ORDER,
    BoardFilterForm,
    ProjectFilterForm,
    ReasonForm,
    ReviewForm,
    TokenForm,
)
from tasks.models import AttemptState, Task, TaskState

MANAGER_ACTIONS = {
    "publish": services.task_publish,
    "unblock": services.task_unblock,
    "reopen": services.task_reopen,
    "cancel": services.task_cancel,
}
INLINE_VIEWERS = {Kind.JUNIT: 3, Kind.DIFF: 2, Kind.LOG: 2, Kind.SCREENSHOT: 6, Kind.NOTE: 6}


def is_htmx(request) -> bool:
    return request.headers.get("HX-Request") == "true"


def refusal_text(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(exc.messages)
    return str(exc)


def navigation(request):
    """What the top bar shows: the user's roles across their projects."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    roles = set().union(*roles_by_project(user).values())
    if user.is_superuser:
        roles |= {Role.REVIEWER, Role.MANAGER}
    return {"nav_roles": sorted(roles)}


def _projects(user):
    return list(Project.objects.filter(pk__in=project_ids_for(user)).order_by("slug"))


def _in_project(queryset, projects, slug):
    if slug:
        chosen = [p for p in projects if p.slug == slug]
        return queryset.filter(project__in=chosen)
    return queryset


@login_required
def home(request):
    roles = navigation(request).get("nav_roles", set())
    if Role.REVIEWER in roles:
        return redirect("review-queue")
    if Role.MANAGER in roles:
        return redirect("dashboard")
    return redirect("task-board")


@login_required
def review_queue(request):
    """Tasks waiting for review, oldest submission first."""
    form = ProjectFilterForm(request.GET)
    form.is_valid()
    projects = _projects(request.user)
    failed_gates = (
        GateRun.objects.filter(
            attempt__task=OuterRef("pk"), state__in=[GateRunState.FAILED, GateRunState.ERROR]
        )
        .order_by()
        .values("attempt__task")
        .annotate(n=Count("pk"))
        .values("n")
    )
    tasks = (
        _in_project(
            selectors.visible_tasks(request.user), projects, form.cleaned_data.get("project")
        )
        .filter(state=TaskState.IN_REVIEW)
        .select_related("project", "current_attempt__agent")
        .annotate(failed_gates=Subquery(failed_gates, output_field=IntegerField()))
        .order_by("current_attempt__submitted_at", "pk")
    )
    now = timezone.now()
    rows = [
        {
            "task": t,
            "age": now - t.current_attempt.submitted_at
            if t.current_attempt and t.current_attempt.submitted_at
            else None,
        }
        for t in tasks[:500]
    ]
    return render(
        request,
        "tasks/queue.html",
        {"rows": rows, "projects": projects, "form": form, "nav": "review"},
    )


@login_required
def task_board(request):
    """Tasks by state, newest activity first in each column."""
    form = BoardFilterForm(request.GET)
    form.is_valid()
    projects = _projects(request.user)
    tasks = _in_project(
        selectors.visible_tasks(request.user), projects, form.cleaned_data.get("project")
    )
    if form.cleaned_data.get("label"):
        tasks = tasks.filter(labels__name=form.cleaned_data["label"])
    if form.cleaned_data.get("q"):
        text = form.cleaned_data["q"]
        tasks = tasks.filter(Q(title__icontains=text) | Q(key__iexact=text))
    counts = dict(tasks.order_by().values_list("state").annotate(n=Count("pk")))
    limit = 50
    columns = []
    for state in STATE_ORDER:
        cards = list(
            tasks.filter(state=state)
            .select_related("current_attempt__agent")
            .order_by("-updated_at")[:limit]
        )
        count = counts.get(state, 0)
        columns.append(
            {
                "state": state,
                "label": TaskState(state).label,
                "cards": cards,
                "count": count,
                "more": count - len(cards),
            }
        )
    return render(
        request,
        "tasks/board.html",
        {"columns": columns, "projects": projects, "form": form, "limit": limit, "nav": "board"},
    )


def _task_or_404(user, key) -> Task:
    try:
        return selectors.task_for(user, key)
    except Task.DoesNotExist:
        raise Http404(f"No task {key} in your projects") from None


def _gate_run_type() -> int:
    return ContentType.objects.get_for_model(GateRun).pk


def _allowed(task, name, user) -> bool:
    try:
        check(task, name, actor=user)
    except ServiceError:
        return False
    return True


def _point_in_time(task, material, events):
    """For a done task: the spec version and the decisions in force when it was approved."""
    approval = next(
        (e for e in reversed(events) if e.transition == "approve" and e.object_key == task.key),
        None,
    )
    attempt = material.attempt
    if approval is None or attempt is None:
        return None
    moment = approval.created_at
    version = attempt.spec_version
    newer = None
    if version is not None:
        newer = (
            SpecVersion.objects.filter(
                spec_id=version.spec_id, accepted_at__lte=moment, number__gt=version.number
            )
            .order_by("number")
            .first()
        )
    in_force = [
        d
        for d in material.decisions
        if d.decided_at
        and d.decided_at <= moment
        and d.state in (DecisionState.ACCEPTED, DecisionState.SUPERSEDED)
        and not any(s.decided_at and s.decided_at <= moment for s in d.superseded_by.all())
    ]
    return {
        "at": moment,
        "by": approval.actor_label,
        "version": version,
        "newer": newer,
        "decisions": in_force,
    }


def _viewers(evidence: list[Evidence]) -> list[dict]:
    """Inline viewers for the first few items of each kind; the rest are links."""
    shown, out = {}, []
    for item in evidence:
        cap = INLINE_VIEWERS.get(item.kind, 0)
        if shown.get(item.kind, 0) >= cap:
            continue
        shown[item.kind] = shown.get(item.kind, 0) + 1
        out.append(_viewer(item))
    return out


def _viewer(item: Evidence) -> dict:
    # Open what a reviewer reads first: the change, the pictures, failing tests.
    failing = item.kind == Kind.JUNIT and (item.summary.get("failed") or item.summary.get("error"))
    opened = item.kind in (Kind.DIFF, Kind.SCREENSHOT) or failing
    view = {"evidence": item, "kind": item.kind, "open": "open" if opened else ""}
    if not viewers.inline(item):
        # Past FACTORY_INLINE_MAX_BYTES nothing is read for the page: it links to the file.
        view["too_large"] = True
    elif item.kind == Kind.JUNIT:
        view["junit"] = viewers.junit_view(item)
    elif item.kind == Kind.DIFF:
        view["diff"] = viewers.diff_view(item)
    elif item.kind == Kind.LOG:
        view["log"] = viewers.log_view(item)
    elif item.kind == Kind.SCREENSHOT:
        view["image"] = viewers.image_type(item) is not None
    else:
        view["text"], view["cut"] = viewers.text_view(item)
    return view


@login_required
def task_detail(request, key):
    """The task page: the handoff answers, criteria beside their evidence, gates, timeline."""
    task = _task_or_404(request.user, key)
    material = handoff.load(task, query_number(request, "attempt"), latest=True)
    attempt = material.attempt
    answers = handoff.answer(material)
    status = criteria_status(
        attempt, evidence=material.evidence, runs=material.runs, criteria=material.criteria
    )
    events = list(Event.objects.filter(task=task).select_related("actor").order_by("id"))
    # Gate runs write queue/start events too; the timeline shows how each one ended.
    timeline = [
        e
        for e in events
        if e.content_type_id != _gate_run_type() or e.transition not in ("queue", "start")
    ]
    proposed_here = [
        d for d in material.decisions if attempt is not None and d.proposed_in_id == attempt.pk
    ]
    user = request.user
    reviewing = task.state == TaskState.IN_REVIEW and _allowed(task, "approve", user)
    context = {
        "task": task,
        "material": material,
        "attempt": attempt,
        "answers": answers,
        "criteria": status,
        "viewers": _viewers([e for e in material.evidence if e.provenance != "gate"]),
        "events": timeline,
        "gate_reports": [e for e in material.evidence if e.provenance == "gate"],
        "submitted_evidence": [e for e in material.evidence if e.provenance != "gate"],
        "proposed_here": proposed_here,
        "decisions": material.decisions,
        "can_review": reviewing,
        "own_work": task.state == TaskState.IN_REVIEW and task.holder_id == user.pk,
        "manager_actions": [name for name in MANAGER_ACTIONS if _allowed(task, name, user)],
        "can_decide": Role.REVIEWER in navigation(request).get("nav_roles", set())
        or Role.MANAGER in navigation(request).get("nav_roles", set()),
        "review_form": ReviewForm(),
        "point_in_time": _point_in_time(task, material, events)
        if task.state == TaskState.DONE
        else None,
        "nav": "board",
    }
    return render(request, "tasks/task_detail.html", context)


@login_required
def task_gates(request, key):
    """The gate-run panel; polled while the attempt is being checked, then the page reloads."""
    task = _task_or_404(request.user, key)
    attempt = task.current_attempt
    runs = list(attempt.gate_runs.order_by("gate")) if attempt else []
    response = render(
        request, "tasks/partials/gate_runs.html", {"task": task, "attempt": attempt, "runs": runs}
    )
    if is_htmx(request) and (attempt is None or attempt.state != AttemptState.CHECKING):
        response["HX-Refresh"] = "true"  # the checks are over: show the page as it is now
    return response


@login_required
@require_POST
def task_review(request, key):
    task = _task_or_404(request.user, key)
    form = ReviewForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose approve or reject.")
        return redirect("task-detail", key=key)
    service = (
        services.task_approve if form.cleaned_data["verdict"] == "approve" else services.task_reject
    )
    try:
        service(task=task, actor=request.user, reason=form.cleaned_data["reason"])
    except (ServiceError, ValidationError) as exc:
        messages.error(request, f"Not recorded: {refusal_text(exc)}")
    else:
        verdict = "approved" if form.cleaned_data["verdict"] == "approve" else "rejected"
        messages.success(request, f"{task.key} {verdict}.")
        return redirect("review-queue")
    return redirect("task-detail", key=key)


@login_required
@require_POST
def task_action(request, key, action):
    task = _task_or_404(request.user, key)
    service = MANAGER_ACTIONS.get(action)
    if service is None:
        raise Http404("No such action")
    form = ReasonForm(request.POST)
    form.is_valid()
    try:
        service(task=task, actor=request.user, reason=form.cleaned_data.get("reason", ""))
    except (ServiceError, ValidationError) as exc:
        messages.error(request, f"Not done: {refusal_text(exc)}")
    else:
        messages.success(request, f"{task.key}: {action} done.")
    return redirect("task-detail", key=key)


def _evidence_or_404(user, evidence_id) -> Evidence:
    try:
        return (
            Evidence.objects.filter(attempt__task__project_id__in=project_ids_for(user))
            .select_related("attempt__task", "uploaded_by")
            .prefetch_related("criteria")
            .get(pk=evidence_id)
        )
    except Evidence.DoesNotExist:
        raise Http404("No such evidence in your projects") from None


@login_required
def evidence_detail(request, evidence_id):
    item = _evidence_or_404(request.user, evidence_id)
    return render(
        request, "evidence/detail.html", {"view": _viewer(item), "item": item, "nav": "board"}
    )


@login_required
def evidence_image(request, evidence_id):
    """A screenshot's bytes, streamed as the image type its magic bytes proved, never as HTML."""
    item = _evidence_or_404(request.user, evidence_id)
    media_type = viewers.image_type(item)
    if media_type is None:
        raise Http404("Not an image")
    return evidence_response(request, item, content_type=media_type, as_attachment=False)


@login_required
@never_cache
def tokens(request):
    """The user's API tokens: issue one (shown once), or revoke.

    Never cached (``no-store``): the answer to an issue shows the token itself.
    """
    created = None
    if request.method == "POST":
        form = TokenForm(request.POST)
        if form.is_valid():
            try:
                _, created = token_issue(user=request.user, days=form.cleaned_data["days"])
            except ValidationError as exc:
                form.add_error(None, exc)
            else:
                messages.success(request, "Token issued. Copy it now: it is not shown again.")
    else:
        form = TokenForm(initial={"days": token_default_days(request.user)})
    rows = AuthToken.objects.filter(user=request.user).order_by("-created")
    response = render(
        request,
        "tasks/tokens.html",
        {
            "form": form,
            "rows": rows,
            "created": created,
            "nav": "tokens",
            "max_days": token_max_days(request.user),
            "cap": settings.FACTORY_TOKEN_MAX_PER_USER,
        },
    )
    response["Pragma"] = "no-cache"  # HTTP/1.0 caches ignore Cache-Control
    return response


@login_required
@require_POST
def token_revoke(request):
    if token_revoke_service(user=request.user, token_key=request.POST.get("token_key", "")):
        messages.success(request, "Token revoked.")
    else:
        messages.error(request, "No such token.")
    return redirect(reverse("tokens"))


@login_required
def dashboard(request):
    """Throughput, first-pass yield, gate failure rate and review latency, drawn as SVG."""
    from tasks.dashboard import dashboard_context

    form = ProjectFilterForm(request.GET)
    form.is_valid()
    projects = _projects(request.user)
    chosen = [p for p in projects if p.slug == form.cleaned_data.get("project")] or projects
    context = dashboard_context(project_ids=[p.pk for p in chosen])
    return render(
        request,
        "tasks/dashboard.html",
        {**context, "projects": projects, "form": form, "nav": "dashboard"},
    )
