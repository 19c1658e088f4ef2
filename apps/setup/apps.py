from django.apps import AppConfig


class SetupConfig(AppConfig):
    """Install and demo commands (`bootstrap`, `seed_demo`): the entry layer, above every other app.

    It has no models; it may import any app, and no app imports it (see .importlinter).
    """

    name = "apps.setup"
    label = "setup"
