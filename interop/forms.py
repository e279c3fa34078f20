"""The import page's form. It parses input only; ``interop.services`` decides and refuses."""

from django import forms


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
