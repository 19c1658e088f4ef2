from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from apps.accounts.models import ApiToken
from apps.accounts.services import api_token_create, api_token_revoke
from apps.audit.middleware import client_ip
from apps.core.errors import ServiceError
from apps.core.users import signed_in_user

LOGIN_LIMIT = 10  # failed attempts per address and username per 15 minutes
LOGIN_WINDOW_S = 15 * 60


def _key(request: HttpRequest) -> str:
    return f"login-fail:{client_ip(request)}:{request.POST.get('username', '')[:150].lower()}"


class ThrottledLoginView(auth_views.LoginView):
    """Django's login view with a lockout after repeated failures for an address and name."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if cache.get(_key(request), 0) >= LOGIN_LIMIT:
            form = self.get_form()
            form.add_error(None, "Too many failed attempts; try again in 15 minutes.")
            return self.render_to_response(self.get_context_data(form=form), status=429)
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form: Any) -> HttpResponse:
        key = _key(self.request)
        cache.set(key, cache.get(key, 0) + 1, LOGIN_WINDOW_S)
        return super().form_invalid(form)


@login_required
def tokens_page(request: HttpRequest) -> HttpResponse:
    new_key = None
    if request.method == "POST":
        if request.POST.get("action") == "revoke":
            token = get_object_or_404(ApiToken, user=signed_in_user(request), pk=request.POST.get("token"))
            api_token_revoke(token=token)
            messages.info(request, f"Token {token.prefix}… revoked.")
        else:
            try:
                _, new_key = api_token_create(user=signed_in_user(request), name=request.POST.get("name", ""))
            except ServiceError as exc:
                messages.error(request, exc.message)
    tokens = ApiToken.objects.filter(user=signed_in_user(request))
    return render(request, "accounts/tokens.html", {"tokens": tokens, "new_key": new_key})
