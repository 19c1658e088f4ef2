from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('nodes', '0004_device_health'),
    ]

    operations = [
        migrations.AddField(
            model_name='sweepwatch',
            name='web_up_since',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='sweepwatch',
            name='web_pulse_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
