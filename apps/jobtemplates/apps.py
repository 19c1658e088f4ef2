from django.apps import AppConfig


class JobtemplatesConfig(AppConfig):
    name = "apps.jobtemplates"
    label = "jobtemplates"
