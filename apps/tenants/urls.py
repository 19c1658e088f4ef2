from django.urls import path

from apps.tenants import views

urlpatterns = [
    path("", views.home, name="home"),
    path("projects/", views.project_list_page, name="project-list"),
    path("projects/<int:pk>/", views.project_detail_page, name="project-detail"),
]
