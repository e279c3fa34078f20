"""Specs and decisions point at projects.Project: the same table, so nothing changes in the database."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('decisions', '0003_decision_search_index'),
        ('projects', '0001_initial'),
    ]

    # The tables and their rows stay where they are; only Django's idea of which app
    # owns the models changes (ADR 0011).
    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='decision',
                    name='project',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='decisions', to='projects.project'),
                ),
                migrations.AlterField(
                    model_name='spec',
                    name='project',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='specs', to='projects.project'),
                ),
            ],
            database_operations=[],
        ),
    ]
