"""Project, Membership and Event now belong to projects; their tables stay."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('decisions', '0004_project_lives_in_projects'),
        ('evidence', '0008_project_lives_in_projects'),
        ('projects', '0001_initial'),
        ('tasks', '0004_event_to_state_blank'),
    ]

    # The tables and their rows stay where they are; only Django's idea of which app
    # owns the models changes (ADR 0011).
    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(
                    model_name='membership',
                    name='project',
                ),
                migrations.RemoveField(
                    model_name='membership',
                    name='user',
                ),
                migrations.RemoveField(
                    model_name='project',
                    name='members',
                ),
                migrations.AlterField(
                    model_name='task',
                    name='project',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='tasks', to='projects.project'),
                ),
                migrations.AlterField(
                    model_name='label',
                    name='project',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='labels', to='projects.project'),
                ),
                migrations.DeleteModel(
                    name='Event',
                ),
                migrations.DeleteModel(
                    name='Membership',
                ),
                migrations.DeleteModel(
                    name='Project',
                ),
            ],
            database_operations=[],
        ),
    ]
