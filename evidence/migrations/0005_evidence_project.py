"""Evidence keeps its attempt's project, so a project's quota is one indexed sum.

The column is added and filled here, and made required in 0006: PostgreSQL refuses to
alter a table in the transaction that queued deferred foreign-key checks on it.
"""

import django.db.models.deletion
from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def fill_projects(apps, schema_editor):
    Attempt = apps.get_model("tasks", "Attempt")
    Evidence = apps.get_model("evidence", "Evidence")
    project = Attempt.objects.filter(pk=OuterRef("attempt_id")).values("task__project_id")[:1]
    Evidence.objects.filter(project__isnull=True).update(project_id=Subquery(project))


class Migration(migrations.Migration):
    dependencies = [
        ("evidence", "0004_gate_run_finished_index"),
        ("tasks", "0004_event_to_state_blank"),
    ]

    operations = [
        migrations.AddField(
            model_name="evidence",
            name="project",
            field=models.ForeignKey(
                editable=False,
                help_text="The attempt's project, kept on the row so a project's quota is one indexed sum.",
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="tasks.project",
            ),
        ),
        migrations.RunPython(fill_projects, migrations.RunPython.noop),
    ]
