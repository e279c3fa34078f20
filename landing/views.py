"""The landing page of a project: its queue, recent batches, pace and lander (members), the
form a manager takes a task out of the queue with (``landing.services.landing_dequeue``),
the button that wakes a lander that backs off (``landing.services.landing_retry``), and the
forms that pause and resume landing (``landing_pause``, ``landing_resume``), and the forms
that quarantine and release a flaky test (``landing_quarantine``) and put a change in the
fast lane (``landing_fast``); and the task page's forms that revert a landed change
(``revert_request``) and take a queued revert back (``revert_cancel``)."""

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from landing import selectors, services
from projects.errors import ServiceError, refusal_text
from projects.models import Project
from projects.pages import is_htmx, may
from projects.roles import Role, has_role
from projects.selectors import project_ids_for, visible_project
from projects.services import require_role
from tasks.models import Task, TaskState


class ReasonForm(forms.Form):
    reason = forms.CharField(required=False, max_length=10_000)


class PauseForm(forms.Form):
    reason = forms.CharField(required=False, max_length=10_000)
    # What a datetime-local input sends, in the site's time zone.
    until = forms.DateTimeField(required=False, input_formats=["%Y-%m-%dT%H:%M"])


DESTINATIONS = [(TaskState.IN_REVIEW, "back to review"), (TaskState.READY, "back to ready")]


def _project_or_404(user, slug: str) -> Project:
    try:
        return visible_project(user, slug)
    except Project.DoesNotExist:
        raise Http404("no such project among yours") from None


def _task_or_404(user, slug: str, key: str) -> Task:
    """The task ``key`` of the project ``slug`` among ``user``'s (its ``project`` read with
    it); a 404 when either is not there."""
    project = _project_or_404(user, slug)
    try:
        return selectors.task_in(project, key)
    except Task.DoesNotExist:
        raise Http404(f"no task {key} in {project.slug}") from None


@login_required
def landing_index(request):
    """The user's projects, each with its landing page; one project goes straight there."""
    projects = list(Project.objects.filter(pk__in=project_ids_for(request.user)).order_by("slug"))
    if len(projects) == 1:
        return redirect("landing", slug=projects[0].slug)
    return render(request, "landing/index.html", {"projects": projects, "nav": "landing"})


@login_required
def landing(request, slug):
    """The queue in landing order, the last batches and how many changes landed in the hour."""
    project = _project_or_404(request.user, slug)
    overview = selectors.landing_overview(project)
    for row in overview["queue"]:
        row["may_dequeue"] = may(row["task"], "dequeue", request.user)
        row["may_fast"] = row["may_dequeue"] and row["lane"] == "normal"
    manager = has_role(request.user, project.pk, Role.MANAGER)
    for row in overview["reverts"]:
        row["may_fast"] = manager and row["lane"] == "normal" and row["state"] != "landing"
        row["may_cancel"] = manager and row["state"] != "landing"
    lander = overview["lander"]
    lander["may_retry"] = lander["backing_off"] and may(lander["object"], "retry", request.user)
    lander["may_pause"] = manager
    context = {
        **overview,
        "project": project,
        "destinations": DESTINATIONS,
        "nav": "landing",
    }
    template = "landing/partials/landing.html" if is_htmx(request) else "landing/page.html"
    return render(request, template, context)


@login_required
@require_POST
def landing_dequeue(request, slug, key):
    """Take a queued task out (managers); a refusal comes back as a message on the page."""
    task = _task_or_404(request.user, slug, key)
    # The fields go to the service as they came: it checks the role before reading them
    # (a form's validation here would tell a reviewer what was wrong with its reason).
    try:
        taken = services.landing_dequeue(
            task=task,
            actor=request.user,
            to=request.POST.get("to", ""),
            reason=request.POST.get("reason", ""),
        )
    except (ServiceError, ValidationError) as exc:
        messages.error(request, f"{key} not taken out of the queue: {refusal_text(exc)}")
    else:
        messages.success(request, f"{key} taken out of the landing queue: it is {taken.state} now.")
    return redirect("landing", slug=task.project.slug)


def _lander_act(request, slug, act, *, done: str, refused: str):
    """A manager's act on the lander with an optional reason (retry, resume): the service
    checks the role first; a refusal comes back as a message on the page."""
    project = _project_or_404(request.user, slug)
    form = ReasonForm(request.POST)
    reason = form.cleaned_data["reason"] if form.is_valid() else ""
    try:
        act(project=project, actor=request.user, reason=reason)
    except ServiceError as exc:
        messages.error(request, f"{refused}: {refusal_text(exc)}")
    else:
        messages.success(request, done)
    return redirect("landing", slug=project.slug)


@login_required
@require_POST
def landing_retry(request, slug):
    """Wake the lander while it backs off (managers)."""
    return _lander_act(
        request,
        slug,
        services.landing_retry,
        done="The lander was woken: it verifies the queue once more now.",
        refused="The lander was not woken",
    )


@login_required
@require_POST
def landing_pause(request, slug):
    """Pause landing (managers), with a reason and an optional end; a refusal comes back as
    a message on the page."""
    project = _project_or_404(request.user, slug)
    form = PauseForm(request.POST)
    try:
        # The role first, as the service would: a reviewer learns nothing of the form.
        require_role(request.user, project.pk, Role.MANAGER)
        if not form.is_valid():
            field, errors = next(iter(form.errors.items()))
            raise ValidationError(f"{field}: {errors[0]}")
        services.landing_pause(project=project, actor=request.user, **form.cleaned_data)
    except (ServiceError, ValidationError) as exc:
        messages.error(request, f"Landing was not paused: {refusal_text(exc)}")
    else:
        messages.success(request, "Landing is paused: approvals queue, nothing lands.")
    return redirect("landing", slug=project.slug)


@login_required
@require_POST
def landing_resume(request, slug):
    """Lift the pause (managers)."""
    return _lander_act(
        request,
        slug,
        services.landing_resume,
        done="Landing resumed: the lander lands what queued meanwhile.",
        refused="Landing was not resumed",
    )


@login_required
@require_POST
def landing_quarantine(request, slug):
    """Quarantine a test with a reason, or release it (managers); a refusal comes back as a
    message on the page. The fields go to the service as they came: it checks the role
    before reading them."""
    project = _project_or_404(request.user, slug)
    test = request.POST.get("test", "")
    quarantined = request.POST.get("quarantined") == "true"
    try:
        services.landing_quarantine(
            project=project,
            actor=request.user,
            test=test,
            quarantined=quarantined,
            reason=request.POST.get("reason", ""),
        )
    except (ServiceError, ValidationError) as exc:
        verb = "quarantined" if quarantined else "released"
        messages.error(request, f"The test was not {verb}: {refusal_text(exc)}")
    else:
        messages.success(
            request,
            f"{test.strip()} is quarantined: its failures neither block nor blame."
            if quarantined
            else f"{test.strip()} is out of quarantine: its failures count again.",
        )
    return redirect("landing", slug=project.slug)


@login_required
@require_POST
def landing_fast(request, slug, key):
    """Put a queued change in the fast lane (managers), with a reason, alone if asked; a
    refusal comes back as a message on the page."""
    task = _task_or_404(request.user, slug, key)
    alone = request.POST.get("alone") == "on"
    try:
        services.landing_fast(
            task=task, actor=request.user, reason=request.POST.get("reason", ""), alone=alone
        )
    except (ServiceError, ValidationError) as exc:
        messages.error(request, f"{key} was not put in the fast lane: {refusal_text(exc)}")
    else:
        messages.success(
            request,
            f"{key} is in the fast lane: it lands next{', in a batch by itself' if alone else ''}, "
            "verified on the target like every change.",
        )
    return redirect("landing", slug=task.project.slug)


def _revert_action(request, slug, key, service, refused: str, done: str):
    """Run a manager's revert service on a task from its page, with the reason as it came
    (the service checks the role before reading it); back to the task page, saying what
    happened (``done``) or why not (``refused``, then the refusal). A form on the landing
    page asks to go back there (``back=landing``)."""
    task = _task_or_404(request.user, slug, key)
    try:
        service(task=task, actor=request.user, reason=request.POST.get("reason", ""))
    except (ServiceError, ValidationError) as exc:
        messages.error(request, f"{refused}: {refusal_text(exc)}")
    else:
        messages.success(request, done)
    if request.POST.get("back") == "landing":
        return redirect(f"{reverse('landing', kwargs={'slug': task.project.slug})}#reverts")
    return redirect("task-detail", key=key)


@login_required
@require_POST
def landing_revert(request, slug, key):
    """Revert a task's landed change (managers), with a reason, from the task page."""
    return _revert_action(
        request,
        slug,
        key,
        services.revert_request,
        refused=f"{key} was not reverted",
        done=f"The revert of {key} is queued: the lander lands it like any change, verified "
        "on the target, and then the task reopens.",
    )


@login_required
@require_POST
def landing_revert_cancel(request, slug, key):
    """Take back a task's queued revert (managers), with a reason, from the task page."""
    return _revert_action(
        request,
        slug,
        key,
        services.revert_cancel,
        refused=f"The revert of {key} was not cancelled",
        done=f"The revert of {key} is cancelled: the lander will not land it, and the task "
        "stays done at its landed commit.",
    )
