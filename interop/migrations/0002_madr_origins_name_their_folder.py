"""A MADR decision's origin names its folder (``madr:docs/adr/0013``), so two ADR logs in one
project never take each other's records. Decisions imported before were given ``madr:0013``;
each is renamed after the folder it was created from, which the applied import that created
it recorded in its report (``source``: ``docs/adr/0013-x.md:1``). So re-importing the same
folder keeps matching them. A record at the upload's root keeps ``madr:0013``, which is what
it is called now too.
"""

import posixpath

from django.db import migrations

PREFIX = "madr:"


def _created_from(run) -> dict[str, str]:
    """Old origin → new origin for each MADR decision this applied run created."""
    renamed = {}
    for item in (run.report or {}).get("items") or []:
        origin = item.get("origin") or ""
        if item.get("kind") != "decision" or item.get("action") != "created":
            continue
        if not origin.startswith(PREFIX) or "/" in origin:
            continue
        folder = posixpath.dirname(str(item.get("source") or "").rsplit(":", 1)[0])
        if folder:
            renamed[origin] = f"{PREFIX}{folder}/{origin[len(PREFIX) :]}"[:300]
    return renamed


def name_folders(apps, schema_editor):
    ImportRun = apps.get_model("interop", "ImportRun")
    Decision = apps.get_model("decisions", "Decision")
    # In the order they were applied: the run that created a record names its folder.
    for run in ImportRun.objects.filter(format="madr", state="applied").order_by("pk"):
        for old, new in _created_from(run).items():
            if Decision.objects.filter(project_id=run.project_id, origin=new).exists():
                continue
            for decision in Decision.objects.filter(project_id=run.project_id, origin=old):
                decision.origin = new
                metadata = dict(decision.metadata or {})
                if "id" in metadata:
                    metadata["id"] = new[len(PREFIX) :]
                decision.metadata = metadata
                decision.save(update_fields=["origin", "metadata"])


class Migration(migrations.Migration):
    dependencies = [
        ("interop", "0001_initial"),
        ("decisions", "0005_imported_origin"),
    ]

    operations = [migrations.RunPython(name_folders, migrations.RunPython.noop, elidable=False)]
