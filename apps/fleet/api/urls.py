from django.urls import URLPattern, URLResolver, path

from apps.fleet.api import views as agent
from apps.fleet.api.node_views import NodeDrainView, NodeListView

urlpatterns: list[URLPattern | URLResolver] = [
    path("nodes/", NodeListView.as_view(), name="api-nodes"),
    path("nodes/<int:pk>/drain/", NodeDrainView.as_view(), name="api-node-drain"),
    path("nodes/<int:pk>/undrain/", NodeDrainView.as_view(undrain=True), name="api-node-undrain"),
    path("agent/register/", agent.RegisterView.as_view(), name="agent-register"),
    path("agent/heartbeat/", agent.HeartbeatView.as_view(), name="agent-heartbeat"),
    path("agent/claim/", agent.ClaimView.as_view(), name="agent-claim"),
    path("agent/events/", agent.EventView.as_view(), name="agent-events"),
    path("agent/rendezvous/", agent.RendezvousView.as_view(), name="agent-rendezvous"),
    path("agent/logs/", agent.LogView.as_view(), name="agent-logs"),
    path("agent/energy/", agent.EnergyView.as_view(), name="agent-energy"),
    path("agent/progress/", agent.ProgressView.as_view(), name="agent-progress"),
    path("agent/checkpoints/", agent.CheckpointView.as_view(), name="agent-checkpoints"),
    path("agent/checkpoints/deleted/", agent.CheckpointDeletedView.as_view(), name="agent-checkpoints-deleted"),
    path("agent/checkpoints/<int:checkpoint_id>/file/", agent.CheckpointFileView.as_view(), name="agent-checkpoint-file"),
    path("agent/checkpoints/<int:checkpoint_id>/complete/", agent.CheckpointCompleteView.as_view(), name="agent-checkpoint-complete"),
    path("agent/checkpoints/<int:checkpoint_id>/download/", agent.CheckpointDownloadLinkView.as_view(),
         name="agent-checkpoint-download"),
]
