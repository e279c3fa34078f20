"""An imported row's origin names its upload (``madr:service-a:docs/decisions/0013``), so two
repositories' logs in one project never take each other's records (ADR 0014).

Each import run gets the origin name it would get today: its file's name less its extension
(the rule of ``interop.origins.default_origin_name``, copied below as it was when this ran).
Each spec, task and decision an applied run created, which carries the origin of before
(``madr:docs/decisions/0013``), is renamed after that run (``madr:<its name>:docs/…``):
the applied import that created a row recorded it in its report (``kind``, ``key``,
``origin``), and keys never change. So the same archive uploaded again after the upgrade
(same file name, so the same default name) finds its rows ``unchanged``, and another archive
never does. A row no run's report names keeps its old origin and matches no upload: taking it
for the first upload that has its id would be the collision itself. A row that already
carries a name (``<format>:<name>:``, written by the code this migration serves, if it is
run again after being unapplied) is left as it is.
"""

import posixpath
import re
import unicodedata
from pathlib import PurePosixPath

from django.db import migrations

ORIGIN_MAX = 300
EXTENSIONS = {
    ".zip",
    ".tar",
    ".tgz",
    ".gz",
    ".tbz2",
    ".bz2",
    ".txz",
    ".xz",
    ".jsonl",
    ".json",
    ".md",
    ".markdown",
    ".yaml",
    ".yml",
    ".txt",
}
OUTSIDE = re.compile(r"[^A-Za-z0-9._-]+")
NAMED = re.compile(r"[a-z]+:[A-Za-z0-9][A-Za-z0-9._-]{0,63}:")
MODELS = {
    "spec": ("decisions", "Spec"),
    "task": ("tasks", "Task"),
    "decision": ("decisions", "Decision"),
}


def default_origin_name(file_name: str) -> str:
    base = re.split(r"[\\/]", file_name or "")[-1]
    for _ in range(2):
        suffix = PurePosixPath(base).suffix
        if suffix.lower() not in EXTENSIONS or suffix == base:
            break
        base = base[: -len(suffix)]
    ascii_text = unicodedata.normalize("NFKD", base).encode("ascii", "ignore").decode()
    name = OUTSIDE.sub("-", ascii_text).lstrip("._-")[:64].rstrip("._-")
    return name or "upload"


def _created(run) -> list[tuple[str, str, set[str]]]:
    """(kind, key, the origins its row may carry now) of each row ``run`` created."""
    prefix = f"{run.format}:"
    created = []
    for item in (run.report or {}).get("items") or []:
        origin, kind = str(item.get("origin") or ""), item.get("kind")
        if item.get("action") != "created" or kind not in MODELS or not origin.startswith(prefix):
            continue
        now = {origin}
        if run.format == "madr" and "/" not in origin:
            # Migration 0002 renamed madr:0013 after its folder without touching the report.
            folder = posixpath.dirname(str(item.get("source") or "").rsplit(":", 1)[0])
            if folder:
                now.add(f"{prefix}{folder}/{origin[len(prefix) :]}"[:ORIGIN_MAX])
        created.append((kind, str(item.get("key") or ""), now))
    return created


def _chunks(values: list, size: int = 500):
    for start in range(0, len(values), size):
        yield values[start : start + size]


def name_uploads(apps, schema_editor):
    ImportRun = apps.get_model("interop", "ImportRun")
    for run in ImportRun.objects.only("pk", "name").iterator():
        ImportRun.objects.filter(pk=run.pk).update(origin_name=default_origin_name(run.name))
    models = {kind: apps.get_model(*label) for kind, label in MODELS.items()}
    renames: dict[tuple[str, int], tuple[int, str]] = {}  # (kind, pk): (project, origin)
    applied = ImportRun.objects.filter(state="applied").order_by("pk")
    for run in applied.only("pk", "project_id", "format", "origin_name", "report").iterator():
        prefix = f"{run.format}:"
        created = _created(run)
        for kind, model in models.items():
            wanted = {key: now for k, key, now in created if k == kind}
            for keys in _chunks(list(wanted)):
                rows = model.objects.filter(project_id=run.project_id, key__in=keys)
                for row in rows.only("pk", "key", "origin"):
                    if row.origin not in wanted[row.key] or NAMED.match(row.origin):
                        continue
                    new = f"{prefix}{run.origin_name}:{row.origin[len(prefix) :]}"[:ORIGIN_MAX]
                    renames.setdefault((kind, row.pk), (run.project_id, new))
    for kind, model in models.items():
        mine = {pk: target for (k, pk), target in renames.items() if k == kind}
        # A name cut at 300 characters, or a row named before (this run again after being
        # unapplied), could hold the new origin already: that row keeps the old one.
        taken = set()
        for targets in _chunks(list(mine.values())):
            projects = {project for project, _ in targets}
            held = model.objects.filter(
                project_id__in=projects, origin__in=[origin for _, origin in targets]
            ).values_list("project_id", "origin")
            taken |= set(held)
        rows = []
        for pk, target in mine.items():
            if target not in taken:
                taken.add(target)
                rows.append(model(pk=pk, origin=target[1]))
        model.objects.bulk_update(rows, ["origin"], batch_size=500)


class Migration(migrations.Migration):
    dependencies = [
        ("interop", "0004_importrun_origin_name"),
        ("decisions", "0005_imported_origin"),
        ("tasks", "0008_imported_origin"),
    ]

    operations = [migrations.RunPython(name_uploads, migrations.RunPython.noop, elidable=False)]
