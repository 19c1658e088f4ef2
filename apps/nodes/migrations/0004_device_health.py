from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('nodes', '0003_node_drained_by_admin'),
    ]

    operations = [
        migrations.AddField(
            model_name='device',
            name='memory_used_bytes',
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='device',
            name='healthy',
            field=models.BooleanField(default=True),
        ),
        migrations.AddField(
            model_name='device',
            name='health_reason',
            field=models.CharField(blank=True, max_length=500),
        ),
        migrations.AddField(
            model_name='device',
            name='health_changed_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
