"""Team webhooks move into the webhooks app (one delivery system): each becomes a team-wide
WebhookEndpoint for budget alerts, with the same URL, secret and active flag."""

from django.db import migrations


def forwards(apps, schema_editor):
    TeamWebhook = apps.get_model("billing", "TeamWebhook")
    WebhookEndpoint = apps.get_model("webhooks", "WebhookEndpoint")
    for hook in TeamWebhook.objects.order_by("pk"):
        endpoint = WebhookEndpoint.objects.create(team_id=hook.team_id, url=hook.url, secret=hook.secret,
                                                  events=["budget.threshold"], active=hook.active,
                                                  description="team budget alerts")
        # Keep when it was set up (auto_now_add ignores a value passed to create()).
        WebhookEndpoint.objects.filter(pk=endpoint.pk).update(created_at=hook.created_at)


def backwards(apps, schema_editor):
    TeamWebhook = apps.get_model("billing", "TeamWebhook")
    WebhookEndpoint = apps.get_model("webhooks", "WebhookEndpoint")
    for endpoint in WebhookEndpoint.objects.filter(team__isnull=False).order_by("pk"):
        TeamWebhook.objects.create(team_id=endpoint.team_id, url=endpoint.url, secret=endpoint.secret, active=endpoint.active)
    WebhookEndpoint.objects.filter(team__isnull=False).delete()


class Migration(migrations.Migration):

    dependencies = [
        ("billing", "0002_usageentry_verbose_name_plural"),
        ("webhooks", "0002_endpoint_and_event_team_scope"),
    ]

    operations = [
        migrations.RunPython(forwards, backwards),
        migrations.DeleteModel(name="TeamWebhook"),
    ]
