from django.apps import AppConfig


class FleetConfig(AppConfig):
    """Where nodes and the runs on them meet: the agent protocol (/api/v1/agent/) and the node
    sessions behind it (register, heartbeat, claim, the lost-node sweep), and the fleet's pages
    and API (/nodes/, /api/v1/nodes/), which show the runs each node holds.

    A layer above apps.nodes, apps.runs and apps.vault, so that nodes never imports runs; no
    models (see .importlinter). Each report is written by a service of the app owning its rows."""

    name = "apps.fleet"
    label = "fleet"
