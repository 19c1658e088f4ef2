from django.apps import AppConfig


class AgentApiConfig(AppConfig):
    """The agent protocol (/api/v1/agent/): its views, and the services that span a node and the
    runs on it (register, heartbeat, claim, the lost-node sweep). A layer above apps.nodes,
    apps.runs and apps.vault, so that nodes never imports runs; no models (see .importlinter).
    Each report is written by a service of the app that owns its rows."""

    name = "apps.agentapi"
    label = "agentapi"
