from django.urls import URLPattern, URLResolver, path

from apps.notifications import views

urlpatterns: list[URLPattern | URLResolver] = [
    path("notifications/", views.notifications_page, name="notifications"),
    path("notifications/<int:pk>/read/", views.notification_read, name="notification-read"),
    path("notifications/read-all/", views.notifications_read_all, name="notifications-read-all"),
]
