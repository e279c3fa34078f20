"""The import pages: a manager uploads a team's files, reads the report, then applies it."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from interop import services
from interop.forms import ImportForm
from interop.models import ImportRun
from projects.errors import ServiceError, refusal_text
from projects.models import Project
from projects.pages import managed_project
from projects.roles import Role
from projects.selectors import project_ids_for


@login_required
def imports_index(request):
    """The projects the user manages, each with its imports page; one project goes straight there."""
    projects = list(Project.objects.filter(pk__in=project_ids_for(request.user, Role.MANAGER)))
    if len(projects) == 1:
        return redirect("imports", slug=projects[0].slug)
    return render(request, "interop/index.html", {"projects": projects, "nav": "imports"})


@login_required
@require_http_methods(["GET", "POST"])
def imports(request, slug):
    """Upload to import (a dry run), and the project's recent imports; exports to download."""
    project = managed_project(request.user, slug)
    form = ImportForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        upload = form.cleaned_data["file"]
        try:
            run = services.import_check(
                project=project,
                actor=request.user,
                format=form.cleaned_data["format"],
                name=upload.name,
                data=services.upload_bytes(upload),
                origin_name=form.cleaned_data["origin_name"] or None,
            )
        except (ServiceError, ValidationError) as exc:
            form.add_error(None, refusal_text(exc))
        else:
            return redirect("import-detail", slug=project.slug, run_id=run.pk)
    rows = project.imports.select_related("actor").defer("upload", "report")[:20]
    context = {"project": project, "form": form, "rows": rows, "nav": "imports"}
    return render(request, "interop/imports.html", context, status=400 if form.errors else 200)


def _run(request, slug, run_id) -> ImportRun:
    project = managed_project(request.user, slug)
    run = project.imports.select_related("actor", "project").filter(pk=run_id).first()
    if run is None:
        raise Http404("no such import")
    return run


@login_required
def import_detail(request, slug, run_id):
    """An import's report: what applying it does (checked) or did (applied), item by item."""
    run = _run(request, slug, run_id)
    items = run.report.get("items", [])
    context = {
        "project": run.project,
        "run": run,
        "report": run.report,
        "items": items[:1000],
        "hidden": max(0, len(items) - 1000),
        "nav": "imports",
    }
    return render(request, "interop/import_detail.html", context)


@login_required
@require_POST
def import_apply(request, slug, run_id):
    run = _run(request, slug, run_id)
    try:
        run = services.import_apply(run=run, actor=request.user)
    except (ServiceError, ValidationError) as exc:
        messages.error(request, f"Not applied: {refusal_text(exc)}")
    else:
        counts = run.report["counts"]
        messages.success(
            request,
            f"Import #{run.pk} applied: {counts['created']} created, {counts['updated']} updated,"
            f" {counts['unchanged']} unchanged, {counts['skipped']} skipped.",
        )
    return redirect("import-detail", slug=slug, run_id=run.pk)
