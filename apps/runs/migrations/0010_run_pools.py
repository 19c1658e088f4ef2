from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("runs", "0009_run_tracked_only"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="pools",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name="run",
            name="pool_reason",
            field=models.TextField(blank=True, default=""),
        ),
    ]
