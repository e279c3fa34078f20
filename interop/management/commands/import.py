"""``manage.py import FORMAT PATH --project FM --as maria [--apply]``: bring a team's files in."""

import io
import json
import zipfile
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from interop import services
from interop.formats import READERS
from projects.errors import ServiceError
from projects.models import Project


def folder_zip(root: Path) -> bytes:
    """A folder as the API takes it: a zip of its files (the archive reader's limits apply)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(root.rglob("*")):
            if path.is_file() and not path.is_symlink() and ".git" not in path.parts:
                archive.write(path, path.relative_to(root).as_posix())
    return buffer.getvalue()


class Command(BaseCommand):
    help = (
        "Import spec-kit, OpenSpec, MADR or beads files into a project. A dry run unless --apply:"
        " the report says what would be created, updated, left unchanged and skipped."
    )

    def add_arguments(self, parser):
        parser.add_argument("format", choices=list(READERS))
        parser.add_argument("path", help="the folder (or archive, or .jsonl file) to import")
        parser.add_argument("--project", required=True, help="the project's slug, e.g. FM")
        parser.add_argument("--as", dest="username", required=True, help="a manager of the project")
        parser.add_argument("--apply", action="store_true", help="write it (default: dry run)")
        parser.add_argument("--mapping", help="spec-kit: a JSON file of criterion proofs")
        parser.add_argument("--json", action="store_true", help="print the whole report as JSON")
        parser.add_argument(
            "--origin-name",
            help="the name that tells these files' records from another upload's (two"
            " repositories' docs/decisions/0013); default: the file's or folder's name",
        )

    def handle(self, *args, **options):
        path = Path(options["path"])
        if not path.exists():
            raise CommandError(f"{path}: no such file or folder")
        project = Project.objects.filter(slug=options["project"]).first()
        if project is None:
            raise CommandError(f"no project {options['project']!r}")
        actor = get_user_model().objects.filter(username=options["username"]).first()
        if actor is None:
            raise CommandError(f"no user {options['username']!r}")
        try:
            mapping = (
                json.loads(Path(options["mapping"]).read_text()) if options["mapping"] else None
            )
        except (OSError, ValueError) as exc:
            raise CommandError(f"--mapping: {exc}") from exc
        data = folder_zip(path) if path.is_dir() else path.read_bytes()
        try:
            run = services.import_upload(
                project=project,
                actor=actor,
                format=options["format"],
                name=path.name + (".zip" if path.is_dir() else ""),
                data=data,
                dry_run=not options["apply"],
                mapping=mapping,
                origin_name=options["origin_name"],
            )
        except ServiceError as exc:
            raise CommandError(str(exc)) from exc
        except ValidationError as exc:
            fields = exc.message_dict if hasattr(exc, "error_dict") else {"": exc.messages}
            problems = [f"{name}: {m}" if name else m for name, ms in fields.items() for m in ms]
            raise CommandError("; ".join(problems)) from exc
        if options["json"]:
            self.stdout.write(json.dumps(run.report, indent=2))
            return
        self.stdout.write(report_text(run))


def report_text(run) -> str:
    report = run.report
    counts = ", ".join(f"{n} {name}" for name, n in report["counts"].items())
    done = "applied" if run.state == "applied" else "dry run (nothing written; --apply to write)"
    lines = [
        f"Import #{run.pk} of {run.name} ({run.format}, origin name {run.origin_name}) into"
        f" {run.project.slug}: {done}.",
        counts,
    ]
    lines += [f"  skipped {s['source']}: {s['reason']}" for s in report["skipped"]]
    lines += [f"  note {n['source']}: {n['message']}" for n in report["notices"][:200]]
    if len(report["notices"]) > 200:
        lines.append(f"  … and {len(report['notices']) - 200} more notes (--json for all)")
    return "\n".join(lines)
