"""Filters of task lists, shared by the API's list and the review UI's board."""

import django_filters
from django.db.models import Exists, OuterRef

from tasks.models import Label, Task, TaskState


class TaskFilter(django_filters.FilterSet):
    """Tasks by project slug, state and label: the one way a task list is filtered by
    label, in the API (``GET /api/v1/tasks/?label=``) and on the board (``/tasks/?label=``)."""

    project = django_filters.CharFilter(field_name="project__slug", help_text="Project slug.")
    state = django_filters.MultipleChoiceFilter(choices=TaskState.choices)
    label = django_filters.CharFilter(method="filter_label", help_text="Tasks carrying this label.")

    class Meta:
        model = Task
        fields = ["project", "state", "label"]

    def filter_label(self, queryset, name, value):
        return queryset.filter(
            Exists(Label.tasks.through.objects.filter(task=OuterRef("pk"), label__name=value))
        )
