from django.urls import path

from apps.audit import views

urlpatterns = [path("audit/", views.audit_page, name="audit")]
