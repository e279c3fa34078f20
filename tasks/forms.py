"""Forms of the review UI. They parse input only; the services decide and refuse."""

from django import forms

from tasks.filters import TEXT_MAX
from tasks.models import TaskState


class ReviewForm(forms.Form):
    """The verdict, its reason, and a mark per criterion: ``criterion:AC-3`` = met, not_met
    or na (empty: unmarked) with ``note:AC-3``, from the criteria table's fields."""

    verdict = forms.ChoiceField(choices=[("approve", "Approve"), ("reject", "Reject")])
    reason = forms.CharField(
        required=False, max_length=10_000, widget=forms.Textarea(attrs={"rows": 3})
    )

    def clean(self):
        data = super().clean()
        marks = []
        for name, value in self.data.items():
            if name.startswith("criterion:") and value:
                key = name.removeprefix("criterion:")
                marks.append(
                    {"key": key, "verdict": value, "note": self.data.get(f"note:{key}", "")}
                )
        data["criteria"] = marks
        return data


class ReasonForm(forms.Form):
    reason = forms.CharField(required=False, max_length=10_000)


class BoardFilterForm(forms.Form):
    """The board's filters, as ``tasks.filters.TaskFilter`` reads them (the API's too)."""

    project = forms.CharField(required=False)
    state = forms.MultipleChoiceField(choices=TaskState.choices, required=False)
    label = forms.CharField(required=False)
    q = forms.CharField(required=False, max_length=TEXT_MAX)


STATE_ORDER = [
    TaskState.DRAFT,
    TaskState.READY,
    TaskState.CLAIMED,
    TaskState.CHECKING,
    TaskState.IN_REVIEW,
    TaskState.APPROVED,  # queued to land
    TaskState.BLOCKED,
    TaskState.FAILED,
    TaskState.DONE,
    TaskState.CANCELLED,
]


class CommentForm(forms.Form):
    """A comment on lines of the attempt's diff; ``tasks.comments.comment_add`` checks them."""

    path = forms.CharField(max_length=1000)
    line = forms.IntegerField(min_value=1, max_value=10_000_000)
    end_line = forms.IntegerField(min_value=1, max_value=10_000_000, required=False)
    side = forms.ChoiceField(choices=[("new", "new"), ("old", "old")], required=False)
    body = forms.CharField(max_length=100_000)

    def clean(self):
        data = super().clean()
        data["side"] = data.get("side") or "new"
        if data.get("end_line") is None:
            data.pop("end_line", None)
        return data
