"""The manager's view in the review UI: the dashboard (throughput, yield, gate failures,
review latency and, for managers, what the work cost) and each project's plan.

Pages only read. Each shows only the projects the user is a member of, and the costs only
those the user manages, as the API does (``oversight.api``).
"""

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render

from decisions.models import Spec
from oversight import plan_svg
from oversight.costs import cost_figures
from oversight.dashboard import dashboard_context
from oversight.plan import plan_for, spec_in
from projects.errors import NotFound
from projects.forms import ProjectFilterForm
from projects.models import Project
from projects.pages import user_projects
from projects.roles import Role
from projects.selectors import project_ids_for, visible_project
from tasks.forms import STATE_ORDER


@login_required
def dashboard(request):
    """Throughput, first-pass yield, gate failure rate and review latency, drawn as SVG;
    for the projects the user manages, what the work cost (self-reported)."""
    form = ProjectFilterForm(request.GET)
    form.is_valid()
    projects = user_projects(request.user)
    chosen = [p for p in projects if p.slug == form.cleaned_data.get("project")] or projects
    context = dashboard_context(project_ids=[p.pk for p in chosen])
    # What the work cost is for the managers of each project, as in the API.
    managed = set(project_ids_for(request.user, Role.MANAGER))
    costly = [p.pk for p in chosen if p.pk in managed]
    costs = None
    if costly:
        costs = cost_figures(
            project_ids=costly, start=context["window_start"], end=context["window_end"]
        )
    return render(
        request,
        "oversight/dashboard.html",
        {**context, "costs": costs, "projects": projects, "form": form, "nav": "dashboard"},
    )


@login_required
def plan_index(request):
    """The user's projects, each with its plan; one project goes straight there."""
    projects = user_projects(request.user)
    if len(projects) == 1:
        return redirect("plan", slug=projects[0].slug)
    return render(request, "oversight/plan_index.html", {"projects": projects, "nav": "plan"})


@login_required
def plan(request, slug):
    """The plan of a project drawn as SVG, its critical path, forecast and every task as a
    table (members); ``?spec=`` narrows it to a spec's tasks and what they wait on."""
    try:
        project = visible_project(request.user, slug)
    except Project.DoesNotExist:
        raise Http404("no such project among yours") from None
    try:
        spec = spec_in(project, request.GET.get("spec"))
    except NotFound as exc:
        raise Http404(exc.detail) from None
    result = plan_for(project, spec=spec)
    by_key = {n["key"]: n for n in result["nodes"]}
    context = {
        "project": project,
        "plan": result,
        "svg": plan_svg.draw(result),
        "rows": plan_svg.table_rows(result),
        "path": [by_key[k] for k in result["critical_path"]["keys"]],
        "specs": list(Spec.objects.filter(project=project).order_by("number").only("key", "title")),
        "spec": spec,
        "states": [s for s in STATE_ORDER if s in {n["state"] for n in result["nodes"]}],
        "nav": "plan",
    }
    return render(request, "oversight/plan.html", context)
