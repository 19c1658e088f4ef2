from django.urls import URLPattern, URLResolver, path

from apps.nodes.views import node_list_page

urlpatterns: list[URLPattern | URLResolver] = [path("nodes/", node_list_page, name="nodes")]
