from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("runs", "0008_run_memory_cpus"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="tracked_only",
            field=models.BooleanField(default=False),
        ),
    ]
