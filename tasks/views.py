"""The review UI for tasks: home, review queue, board, task page (the dashboard and the
plan are the manager's view, ``oversight.views``).

Every state change goes through the same service as the API; a refusal comes back
as a message on the page. Objects are reached through the user's memberships, so
another project's task is a 404.
"""

from collections import defaultdict

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ValidationError
from django.db.models import Count, F, Func, IntegerField, OuterRef, Subquery
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.views.decorators.http import require_POST

from decisions.models import Check, DecisionState, SpecVersion
from evidence import viewers
from evidence.models import GateRun, GateRunState
from evidence.selectors import criteria_status, runner_view
from projects.errors import ServiceError, refusal_text
from projects.forms import ProjectFilterForm
from projects.models import Event
from projects.numbers import query_number
from projects.pages import in_project, is_htmx, may, navigation, user_projects
from projects.roles import Role, has_role
from tasks import handoff, review, selectors, services
from tasks.comments import comment_add, comment_resolve
from tasks.filters import TaskFilter
from tasks.forms import STATE_ORDER, BoardFilterForm, CommentForm, ReasonForm, ReviewForm
from tasks.models import AttemptState, LineComment, Task, TaskState
from tasks.usage import shown_with_void

MANAGER_ACTIONS = {
    "publish": services.task_publish,
    "unblock": services.task_unblock,
    "reopen": services.task_reopen,
    "cancel": services.task_cancel,
}


@login_required
def home(request):
    roles = navigation(request).get("nav_roles", set())
    if Role.REVIEWER in roles:
        return redirect("review-queue")
    if Role.MANAGER in roles:
        return redirect("dashboard")
    return redirect("task-board")


def _count_of(rows) -> Subquery:
    """How many ``rows`` there are, as a subquery of the outer query: 0 for none."""
    # COUNT as a plain function, so Django adds no GROUP BY and an empty set counts 0.
    count = rows.order_by().annotate(n=Func(F("pk"), function="COUNT")).values("n")
    return Subquery(count, output_field=IntegerField())


@login_required
def review_queue(request):
    """Tasks waiting for review, oldest submission first."""
    form = ProjectFilterForm(request.GET)
    form.is_valid()
    projects = user_projects(request.user)
    failed = GateRun.objects.filter(state__in=[GateRunState.FAILED, GateRunState.ERROR])
    tasks = (
        in_project(
            selectors.visible_tasks(request.user), projects, form.cleaned_data.get("project")
        )
        .filter(state=TaskState.IN_REVIEW)
        .select_related("project", "current_attempt__agent")
        # The attempt under review is judged on its own gates; earlier attempts' failures
        # are history, counted apart so they never read as this attempt's.
        .annotate(
            failed_gates=_count_of(failed.filter(attempt=OuterRef("current_attempt"))),
            earlier_failed_gates=_count_of(
                failed.filter(attempt__task=OuterRef("pk")).exclude(
                    attempt=OuterRef("current_attempt")
                )
            ),
        )
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
    projects = user_projects(request.user)
    # Filtered as the API filters its list: the same FilterSet, fed by the board's form.
    tasks = TaskFilter(
        {name: value for name, value in form.cleaned_data.items() if value},
        queryset=selectors.visible_tasks(request.user),
    ).qs
    states = set(form.cleaned_data.get("state") or ())
    counts = dict(tasks.order_by().values_list("state").annotate(n=Count("pk")))
    limit = 50
    columns = []
    for state in STATE_ORDER:
        if states and state not in states:
            continue
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
        {
            "columns": columns,
            "projects": projects,
            "states": [(s.value, s.label) for s in STATE_ORDER],
            "form": form,
            "limit": limit,
            "nav": "board",
        },
    )


def _task_or_404(user, key) -> Task:
    try:
        return selectors.task_for(user, key)
    except Task.DoesNotExist:
        raise Http404(f"No task {key} in your projects") from None


def _gate_run_type() -> int:
    return ContentType.objects.get_for_model(GateRun).pk


def _point_in_time(task, material, events):
    """For a done task: what was in force when it was approved. The record the review
    stored (``Attempt.applied``); for approvals older than that record, rebuilt from the
    timeline and the decisions' dates."""
    approval = next(
        (e for e in reversed(events) if e.transition == "approve" and e.object_key == task.key),
        None,
    )
    attempt = material.attempt
    if approval is None or attempt is None:
        return None
    found = {"at": approval.created_at, "by": approval.actor_label}
    if attempt.applied:
        return {**found, **attempt.applied, "stored": True}
    moment = approval.created_at
    version = attempt.spec_version
    spec = None
    if version is not None:
        newer = (
            SpecVersion.objects.filter(
                spec_id=version.spec_id, accepted_at__lte=moment, number__gt=version.number
            )
            .order_by("number")
            .first()
        )
        spec = {
            "key": version.spec.key,
            "version": version.number,
            "current_version": newer.number if newer else version.number,
        }
    in_force = [
        {"key": d.key, "title": d.title}
        for d in material.decisions
        if d.decided_at
        and d.decided_at <= moment
        and d.state in (DecisionState.ACCEPTED, DecisionState.SUPERSEDED)
        and not any(s.decided_at and s.decided_at <= moment for s in d.superseded_by.all())
    ]
    return {**found, "spec": spec, "decisions": in_force, "stored": False}


@login_required
def task_detail(request, key):
    """The task page: the handoff answers, criteria beside their evidence, gates, timeline."""
    return _task_page(request, _task_or_404(request.user, key))


def _task_page(request, task, *, posted=None, status=200):
    """The task page; ``posted`` is a refused review's input, shown again to be corrected."""
    material = handoff.load(task, query_number(request, "attempt"), latest=True)
    attempt = material.attempt
    answers = handoff.answer(material)
    status_rows = criteria_status(
        attempt, evidence=material.evidence, runs=material.runs, criteria=material.criteria
    )
    judged = {r["key"]: r for r in (attempt.criteria_verdicts if attempt else [])}
    marks = {m["key"]: m for m in (posted or {}).get("criteria", [])}
    for row in status_rows:
        key = row["criterion"].key
        row["judged"] = judged.get(key)
        # A refused review shows again what was typed, notes on unmarked criteria too.
        row["mark"] = {
            "verdict": marks.get(key, {}).get("verdict", ""),
            "note": request.POST.get(f"note:{key}", "") if posted else "",
        }
        row["in_review"] = row["criterion"].proof.get("check") == Check.REVIEW
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
    reviewing = task.state == TaskState.IN_REVIEW and may(task, "approve", user)
    shown = [e for e in material.evidence if e.provenance != "gate"]
    page_viewers = viewers.page_viewers(shown)
    comments = list(attempt.comments.select_related("author")) if attempt else []
    # Only the attempt under review takes new comments; an earlier one's page shows its own.
    current = reviewing and attempt is not None and attempt.pk == task.current_attempt_id
    _hang_comments(page_viewers, comments, selectors.commented_diff(material.evidence), current)
    context = {
        "task": task,
        "material": material,
        "attempt": attempt,
        "answers": answers,
        "criteria": status_rows,
        "to_mark": [row["criterion"].key for row in status_rows if row["in_review"]],
        "viewers": page_viewers,
        "events": timeline,
        "gate_reports": [e for e in material.evidence if e.provenance == "gate"],
        "runner": runner_view(attempt, material.runs, material.evidence),
        "landing": selectors.landing_of(task, attempt),
        "approved_before": selectors.approval_before(attempt, material.evidence),
        "usage": _usage_view(attempt),
        "submitted_evidence": shown,
        "proposed_here": proposed_here,
        "decisions": material.decisions,
        "can_review": reviewing,
        "own_work": task.state == TaskState.IN_REVIEW and task.holder_id == user.pk,
        "manager_actions": [name for name in MANAGER_ACTIONS if may(task, name, user)],
        "can_decide": Role.REVIEWER in navigation(request).get("nav_roles", set())
        or Role.MANAGER in navigation(request).get("nav_roles", set()),
        "posted": posted or {},
        "comments": comments,
        "comment_paths": _diff_paths(material.evidence) if current else [],
        "marking": current,
        "revert_form": _revert_form(task, attempt, user),
        "point_in_time": _point_in_time(task, material, events)
        if task.state == TaskState.DONE
        else None,
        "nav": "board",
    }
    return render(request, "tasks/task_detail.html", context, status=status)


def _revert_form(task, attempt, user) -> str:
    """Which revert form the Landing panel offers ``user``: ``revert`` for a landed change,
    ``cancel`` for its queued revert, "" for neither (``landing.services.revert_request``
    and ``revert_cancel`` have the last word)."""
    if not (
        task.state == TaskState.DONE
        and task.landed_commit
        and attempt is not None
        and attempt.pk == task.current_attempt_id
        and has_role(user, task.project_id, Role.MANAGER)
    ):
        return ""
    if attempt.revert_at is not None:
        return "cancel"
    return "revert" if task.project.lands and not task.project.lands_through_host else ""


def _usage_view(attempt) -> dict | None:
    """The attempt's self-reported usage and its void, for the Usage panel; None when it
    reported nothing and nothing was voided."""
    if attempt is None or not (attempt.usage or attempt.usage_voided):
        return None
    usage = shown_with_void(attempt.usage, attempt.usage_voided)
    if usage["voided"]:
        usage["voided"]["at"] = parse_datetime(usage["voided"]["at"] or "")
    return usage


def _hang_comments(page_viewers, comments, diff, commentable: bool) -> None:
    """Show each line comment under the last line it names, in the viewer of the diff it
    was written against; that viewer takes new comments when ``commentable`` (the attempt
    shown is the one in review)."""
    by_line = defaultdict(list)
    for comment in comments:
        by_line[comment.path, comment.side, comment.end_line].append(comment)
    for view in page_viewers:
        if diff is None or view["evidence"].pk != diff.pk or "diff" not in view:
            continue
        view["commentable"] = commentable
        for file in view["diff"].files:
            for line in file.lines:
                line.comments = by_line.get((file.path, "new", line.new), []) + (
                    by_line.get((file.path, "old", line.old), []) if line.kind != "add" else []
                )


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
    """Record a verdict; a refused one shows the page again with what was typed and why."""
    task = _task_or_404(request.user, key)
    form = ReviewForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose approve or reject.")
        return redirect("task-detail", key=key)
    try:
        review.task_review(task=task, actor=request.user, **form.cleaned_data)
    except (ServiceError, ValidationError) as exc:
        messages.error(request, f"Not recorded: {refusal_text(exc)}")
        return _task_page(request, task, posted=form.cleaned_data, status=400)
    verdict = "approved" if form.cleaned_data["verdict"] == "approve" else "rejected"
    messages.success(request, f"{task.key} {verdict}.")
    return redirect("review-queue")


def _diff_paths(evidence) -> list[str]:
    """The files the attempt's diffs change, for the comment form's choice of file."""
    return sorted(
        {path for e in evidence if e.kind == "diff" for path in (e.summary or {}).get("paths", [])}
    )


@login_required
@require_POST
def task_comment(request, key):
    """A reviewer's comment on lines of the current attempt's diff."""
    task = _task_or_404(request.user, key)
    form = CommentForm(request.POST)
    if not form.is_valid() or task.current_attempt is None:
        messages.error(request, "Not recorded: name the file, the line and what is wrong.")
        return redirect("task-detail", key=key)
    try:
        comment = comment_add(attempt=task.current_attempt, actor=request.user, **form.cleaned_data)
    except (ServiceError, ValidationError) as exc:
        messages.error(request, f"Not recorded: {refusal_text(exc)}")
    else:
        messages.success(request, f"Comment on {comment.where} recorded.")
    return redirect(f"{reverse('task-detail', args=[key])}#comments")


@login_required
@require_POST
def task_comment_resolve(request, key, comment_id):
    task = _task_or_404(request.user, key)
    comment = LineComment.objects.filter(attempt__task=task, pk=comment_id).first()
    if comment is None:
        raise Http404("No such comment")
    try:
        comment_resolve(comment=comment, actor=request.user)
    except (ServiceError, ValidationError) as exc:
        messages.error(request, f"Not done: {refusal_text(exc)}")
    else:
        messages.success(request, f"Comment on {comment.where} resolved.")
    return redirect(f"{reverse('task-detail', args=[key])}#comments")


@login_required
@require_POST
def task_action(request, key, action):
    task = _task_or_404(request.user, key)
    service = MANAGER_ACTIONS.get(action)
    if service is None:
        raise Http404("No such action")
    form = ReasonForm(request.POST)
    if not form.is_valid():  # a reason dropped would leave the trail without it
        problems = "; ".join(f"{name}: {' '.join(e)}" for name, e in form.errors.items())
        messages.error(request, f"Not done: {problems}")
        return redirect("task-detail", key=key)
    try:
        service(task=task, actor=request.user, reason=form.cleaned_data["reason"])
    except (ServiceError, ValidationError) as exc:
        messages.error(request, f"Not done: {refusal_text(exc)}")
    else:
        messages.success(request, f"{task.key}: {action} done.")
    return redirect("task-detail", key=key)
