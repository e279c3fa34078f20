"""Forms the kernel's pages share. They parse input only; the services decide and refuse."""

from django import forms

from projects.numbers import WholeNumberField


class ProjectFilterForm(forms.Form):
    project = forms.CharField(required=False)


class TokenForm(forms.Form):
    # The bound for this user is the service's to check (projects.tokens.token_issue).
    days = WholeNumberField(min_value=1, max_value=3650)
