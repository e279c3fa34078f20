import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("evidence", "0005_evidence_project"),
    ]

    operations = [
        migrations.AlterField(
            model_name="evidence",
            name="project",
            field=models.ForeignKey(
                editable=False,
                help_text="The attempt's project, kept on the row so a project's quota is one indexed sum.",
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="tasks.project",
            ),
        ),
        migrations.AddIndex(
            model_name="evidence",
            index=models.Index(
                fields=["project", "provenance", "size"], name="evidence_project_usage"
            ),
        ),
    ]
