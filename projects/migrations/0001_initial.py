"""Project, Membership and Event move from tasks to projects, keeping their tables."""

import django.core.validators
import django.db.models.deletion
import django.utils.timezone
import projects.models
from django.conf import settings
from django.db import migrations, models


MOVED = ["project", "membership", "event"]


def rename_content_types(apps, schema_editor):
    """Audit events point at their subject by content type: keep those links, and the
    permissions tied to the models, by moving the content types, not making new ones."""
    content_types = apps.get_model("contenttypes", "ContentType")
    content_types.objects.filter(app_label="tasks", model__in=MOVED).update(app_label="projects")


def rename_content_types_back(apps, schema_editor):
    content_types = apps.get_model("contenttypes", "ContentType")
    content_types.objects.filter(app_label="projects", model__in=MOVED).update(app_label="tasks")


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('contenttypes', '0002_remove_content_type_name'),
        ('tasks', '0004_event_to_state_blank'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    # The tables and their rows stay where they are; only Django's idea of which app
    # owns the models changes (ADR 0011).
    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='Membership',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('role', models.CharField(choices=[('agent', 'Agent'), ('verifier', 'Verifier'), ('reviewer', 'Reviewer'), ('manager', 'Manager')], max_length=16)),
                        ('created_at', models.DateTimeField(default=django.utils.timezone.now, editable=False)),
                        ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'tasks_membership',
                    },
                ),
                migrations.CreateModel(
                    name='Project',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('slug', models.CharField(help_text='Key prefix, e.g. FM gives tasks FM-1, specs FM-S1, decisions FM-D1.', max_length=12, unique=True, validators=[django.core.validators.RegexValidator('^[A-Z][A-Z0-9]{0,11}$', 'Use 1-12 capital letters or digits, starting with a letter.')])),
                        ('name', models.CharField(max_length=200)),
                        ('repository_url', models.URLField(blank=True)),
                        ('gate_policy', models.JSONField(blank=True, default=projects.models.default_gate_policy, help_text='Gates to run on each submission, with parameters: {"coverage": {"threshold": 0.8}}.')),
                        ('max_attempts', models.PositiveSmallIntegerField(default=3, help_text='Default for new tasks: failed attempts allowed before a task fails.')),
                        ('task_seq', models.PositiveIntegerField(default=0, editable=False)),
                        ('spec_seq', models.PositiveIntegerField(default=0, editable=False)),
                        ('decision_seq', models.PositiveIntegerField(default=0, editable=False)),
                        ('created_at', models.DateTimeField(default=django.utils.timezone.now, editable=False)),
                        ('members', models.ManyToManyField(related_name='projects', through='projects.Membership', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'tasks_project',
                        'ordering': ['slug'],
                    },
                ),
                migrations.AddField(
                    model_name='membership',
                    name='project',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to='projects.project'),
                ),
                migrations.CreateModel(
                    name='Event',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('object_id', models.PositiveBigIntegerField()),
                        ('object_key', models.CharField(help_text="The object's key when it happened.", max_length=64)),
                        ('transition', models.CharField(max_length=50)),
                        ('from_state', models.CharField(blank=True, max_length=20)),
                        ('to_state', models.CharField(blank=True, max_length=20)),
                        ('reason', models.TextField(blank=True)),
                        ('extra', models.JSONField(blank=True, default=dict)),
                        ('created_at', models.DateTimeField(db_index=True, default=django.utils.timezone.now, editable=False)),
                        ('actor', models.ForeignKey(blank=True, help_text='Empty when the system acted (a gate worker or the reconciler).', null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('content_type', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, to='contenttypes.contenttype')),
                        ('task', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='events', to='tasks.task')),
                        ('project', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='events', to='projects.project')),
                    ],
                    options={
                        'db_table': 'tasks_event',
                        'ordering': ['created_at', 'id'],
                    },
                ),
                migrations.AddConstraint(
                    model_name='membership',
                    constraint=models.UniqueConstraint(fields=('user', 'project', 'role'), name='membership_unique_role'),
                ),
                migrations.AddIndex(
                    model_name='event',
                    index=models.Index(fields=['content_type', 'object_id'], name='event_subject'),
                ),
                migrations.AddIndex(
                    model_name='event',
                    index=models.Index(fields=['task', 'created_at'], name='event_task_timeline'),
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(rename_content_types, rename_content_types_back, elidable=False),
    ]
