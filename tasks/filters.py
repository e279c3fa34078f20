"""Filters of task lists, shared by the API's list and the review UI's board.

``TaskFilter`` is the one way a task list is narrowed by project, state, label and text:
the API (``GET /api/v1/tasks/?project=&state=&label=&q=``) and the board (``/tasks/``,
whose form feeds it) give the same tasks for the same filters.
"""

import django_filters
from django.db.models import Exists, OuterRef, Q

from tasks.models import Label, Task, TaskState

# The longest text the board's "Find" box and the API's ``q`` accept.
TEXT_MAX = 200


class TaskFilter(django_filters.FilterSet):
    """Tasks by project slug, state, label and text (in the title, or the whole key)."""

    project = django_filters.CharFilter(field_name="project__slug", help_text="Project slug.")
    state = django_filters.MultipleChoiceFilter(choices=TaskState.choices)
    label = django_filters.CharFilter(method="filter_label", help_text="Tasks carrying this label.")
    q = django_filters.CharFilter(
        method="filter_text",
        max_length=TEXT_MAX,
        help_text="Text in the title (any case), or a task's whole key (e.g. fm-12).",
    )

    class Meta:
        model = Task
        fields = ["project", "state", "label", "q"]

    def filter_label(self, queryset, name, value):
        return queryset.filter(
            Exists(Label.tasks.through.objects.filter(task=OuterRef("pk"), label__name=value))
        )

    def filter_text(self, queryset, name, value):
        return queryset.filter(Q(title__icontains=value) | Q(key__iexact=value))
