from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("interop", "0003_import_runs_expire"),
    ]

    operations = [
        migrations.AddField(
            model_name="importrun",
            name="origin_name",
            field=models.CharField(
                default="",
                help_text="The name its rows' origins carry (<format>:<origin name>:<id>): given at"
                " upload, else the file's name less its extension (interop.origins).",
                max_length=64,
            ),
            preserve_default=False,
        ),
    ]
