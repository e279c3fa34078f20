"""Evidence points at projects.Project: the same table, so nothing changes in the database."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('evidence', '0007_provenance_runner'),
        ('projects', '0001_initial'),
    ]

    # The tables and their rows stay where they are; only Django's idea of which app
    # owns the models changes (ADR 0011).
    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='evidence',
                    name='project',
                    field=models.ForeignKey(editable=False, help_text="The attempt's project, kept on the row so a project's quota is one indexed sum.", on_delete=django.db.models.deletion.PROTECT, related_name='+', to='projects.project'),
                ),
            ],
            database_operations=[],
        ),
    ]
