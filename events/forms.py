"""The webhook pages' forms. They only read input; ``events.services`` decides."""

from django import forms

from events.models import Format
from events.types import DESCRIPTIONS, TYPES


class SubscriptionForm(forms.Form):
    url = forms.CharField(
        max_length=2000,
        label="Target URL",
        help_text="http(s); for commit statuses, with {sha} where the commit goes.",
    )
    description = forms.CharField(max_length=200, required=False)
    format = forms.ChoiceField(choices=Format.choices, initial=Format.STANDARD)
    types = forms.MultipleChoiceField(
        choices=[(t, f"{t} — {DESCRIPTIONS[t]}") for t in TYPES],
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: every type.",
    )
    token = forms.CharField(
        max_length=500,
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Commit statuses only: the bearer token the code host wants. Never shown again.",
    )
    context = forms.CharField(max_length=100, required=False, initial="factory-memory")


class SubscriptionEditForm(SubscriptionForm):
    active = forms.BooleanField(required=False)
    token = forms.CharField(
        max_length=500,
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Leave empty to keep the token it has; a new URL clears it unless"
        " you enter it again here.",
    )
