from django.urls import URLPattern, URLResolver, path

from apps.fleet.views import node_list_page

urlpatterns: list[URLPattern | URLResolver] = [path("nodes/", node_list_page, name="nodes")]
