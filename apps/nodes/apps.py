from django.apps import AppConfig


class NodesConfig(AppConfig):
    name = "apps.nodes"
    label = "nodes"
