"""``manage.py export FORMAT --project FM [--spec FM-S1] [-o FILE]``: give a project's records back."""

import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from interop import exporter
from interop.services import EXPORTS
from projects.errors import ServiceError
from projects.models import Project


class Command(BaseCommand):
    help = (
        "Export a project's decisions as a MADR 4 folder (zip), its tasks as beads JSONL, or a"
        " spec as a spec-kit spec.md."
    )

    def add_arguments(self, parser):
        parser.add_argument("format", choices=EXPORTS)
        parser.add_argument("--project", required=True)
        parser.add_argument("--spec", help="speckit: the spec's key, e.g. FM-S1")
        parser.add_argument("-o", "--output", help="the file to write (default: its own name)")

    def handle(self, *args, **options):
        project = Project.objects.filter(slug=options["project"]).first()
        if project is None:
            raise CommandError(f"no project {options['project']!r}")
        try:
            name, _, data = exporter.export(
                project=project, format=options["format"], spec_key=options["spec"]
            )
        except ServiceError as exc:
            raise CommandError(str(exc)) from exc
        if options["output"] == "-":
            sys.stdout.buffer.write(data)
            return
        target = Path(options["output"] or name)
        target.write_bytes(data)
        self.stdout.write(f"Wrote {target} ({len(data)} bytes).")
