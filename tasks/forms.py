"""Forms of the review UI. They parse input only; the services decide and refuse."""

from django import forms

from tasks.models import TaskState


class ReviewForm(forms.Form):
    verdict = forms.ChoiceField(choices=[("approve", "Approve"), ("reject", "Reject")])
    reason = forms.CharField(
        required=False, max_length=10_000, widget=forms.Textarea(attrs={"rows": 3})
    )


class ReasonForm(forms.Form):
    reason = forms.CharField(required=False, max_length=10_000)


class BoardFilterForm(forms.Form):
    project = forms.CharField(required=False)
    label = forms.CharField(required=False)
    q = forms.CharField(required=False, max_length=200)


STATE_ORDER = [
    TaskState.DRAFT,
    TaskState.READY,
    TaskState.CLAIMED,
    TaskState.CHECKING,
    TaskState.IN_REVIEW,
    TaskState.BLOCKED,
    TaskState.FAILED,
    TaskState.DONE,
    TaskState.CANCELLED,
]
