from django.urls import path

from apps.accounts.api.views import ObtainTokenView, TokenListView, TokenRevokeView

urlpatterns = [
    path("auth/token/", ObtainTokenView.as_view(), name="api-token"),
    path("auth/tokens/", TokenListView.as_view(), name="api-token-list"),
    path("auth/tokens/<int:pk>/", TokenRevokeView.as_view(), name="api-token-revoke"),
]
