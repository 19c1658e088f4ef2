from django.urls import URLPattern, URLResolver, path

from apps.tracking import views

urlpatterns: list[URLPattern | URLResolver] = [
    path("runs/", views.runs_list_page, name="run-list"),
    path("runs/<int:pk>/", views.run_detail_page, name="run-detail"),
    path("runs/overview/", views.runs_overview_fragment, name="runs-overview"),
    path("compare/", views.compare_page, name="compare"),
    path("compare/export.csv", views.compare_csv, name="compare-csv"),
    path("compare/v/<int:pk>/", views.saved_compare_page, name="compare-saved"),
]
