"""The import page's form. It parses input only; ``interop.services`` decides and refuses."""

from django import forms

from interop import origins


class ImportForm(forms.Form):
    format = forms.ChoiceField(
        choices=[
            ("speckit", "spec-kit (specs/NNN-feature/ folders)"),
            ("openspec", "OpenSpec (openspec/ folder)"),
            ("madr", "MADR (an ADR folder)"),
            ("beads", "beads (.beads/issues.jsonl)"),
        ]
    )
    file = forms.FileField(help_text="A zip or tar of the folder, or the .jsonl file.")
    origin_name = forms.CharField(
        required=False,
        max_length=origins.ORIGIN_NAME_MAX,
        label="Origin name (optional)",
        help_text="Tells this upload's records from another's, such as two repositories' ADR"
        " 0013. Letters, digits, '.', '_' and '-'. Empty: the file's name without its"
        " extension. Use the same name each time you upload the same files.",
    )

    def clean_origin_name(self) -> str:
        name = self.cleaned_data["origin_name"]
        if name and not origins.valid_origin_name(name):
            raise forms.ValidationError(origins.ORIGIN_NAME_RULE)
        return name
