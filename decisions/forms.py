"""Forms of the decision log and verdicts. They parse input only; the services decide."""

from django import forms

from decisions.models import DecisionState


class DecisionFilterForm(forms.Form):
    q = forms.CharField(required=False, max_length=500, label="Search")
    project = forms.CharField(required=False)
    state = forms.ChoiceField(required=False, choices=[("", "any state"), *DecisionState.choices])
    spec = forms.CharField(required=False, max_length=32, label="Spec key")
    since = forms.DateField(
        required=False, widget=forms.DateInput(attrs={"type": "date"}), label="Decided from"
    )
    until = forms.DateField(
        required=False, widget=forms.DateInput(attrs={"type": "date"}), label="Decided until"
    )


class VerdictForm(forms.Form):
    reason = forms.CharField(required=False, max_length=10_000)
