from django.urls import URLPattern, URLResolver

urlpatterns: list[URLPattern | URLResolver] = []
