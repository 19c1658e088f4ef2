from django.urls import URLPattern, URLResolver, path

from apps.nodes.api.views import NodeDrainView, NodeListView

urlpatterns: list[URLPattern | URLResolver] = [
    path("nodes/", NodeListView.as_view(), name="api-nodes"),
    path("nodes/<int:pk>/drain/", NodeDrainView.as_view(), name="api-node-drain"),
    path("nodes/<int:pk>/undrain/", NodeDrainView.as_view(undrain=True), name="api-node-undrain"),
]
