"""The evidence pages of the review UI: one item with its viewer, and a screenshot's bytes."""

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import render

from evidence import viewers
from evidence.models import Evidence
from evidence.responses import evidence_response
from projects.selectors import project_ids_for


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
        request,
        "evidence/detail.html",
        {"view": viewers.page_viewer(item), "item": item, "nav": "board"},
    )


@login_required
def evidence_image(request, evidence_id):
    """A screenshot's bytes, streamed as the image type its magic bytes proved, never as HTML."""
    item = _evidence_or_404(request.user, evidence_id)
    media_type = viewers.image_type(item)
    if media_type is None:
        raise Http404("Not an image")
    return evidence_response(request, item, content_type=media_type, as_attachment=False)
