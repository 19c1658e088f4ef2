from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0006_run_notes"),
    ]

    operations = [
        migrations.AddField(
            model_name="checkpoint",
            name="uploaded_at",
            field=models.DateTimeField(
                blank=True,
                help_text="The agent's direct upload arrived; a worker checks it before it counts as stored.",
                null=True,
            ),
        ),
    ]
