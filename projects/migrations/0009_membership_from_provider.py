"""Membership.from_provider: the roles single sign-on's role map granted (ADR 0022).

Rows granted before the field existed are found by their grant Event: by the system, with
the reason the sign-in gives (projects.sso.REASON when this was written).
"""

from django.db import migrations, models

SIGN_IN = "single sign-on: the identity provider's role claim"


def mark_granted_by_sign_in(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    Event = apps.get_model("projects", "Event")
    Membership = apps.get_model("projects", "Membership")
    kind = ContentType.objects.filter(app_label="projects", model="membership").first()
    if kind is None:
        return  # a new database: nothing was granted yet
    granted = Event.objects.filter(
        content_type=kind, transition="grant", actor__isnull=True, reason=SIGN_IN
    ).values("object_id")
    Membership.objects.filter(pk__in=granted).update(from_provider=True)


class Migration(migrations.Migration):
    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("projects", "0008_event_of_the_site"),
    ]

    operations = [
        migrations.AddField(
            model_name="membership",
            name="from_provider",
            field=models.BooleanField(
                default=False,
                editable=False,
                help_text="Granted by the identity provider's role claim (single sign-on), "
                "which takes it back when the claim no longer grants it.",
            ),
        ),
        migrations.RunPython(mark_granted_by_sign_in, migrations.RunPython.noop),
    ]
