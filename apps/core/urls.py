from django.urls import path

from apps.core import storage_views, views

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    # The local store's presigned URLs (API-shaped: JSON errors), here because apps.core has no api/urls.
    path("api/v1/storage/object/", storage_views.storage_object, name="storage-object"),
]
