from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from apps.accounts.models import ApiToken
from apps.accounts.services import api_token_create, api_token_revoke, login_failure_record, login_lockout_active
from apps.audit.middleware import client_ip
from apps.core.errors import ServiceError
from apps.core.users import signed_in_user

NEW_KEY = "new_api_token_key"


class ThrottledLoginView(auth_views.LoginView):
    """Django's login view with a lockout after repeated failures for an address and name."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if login_lockout_active(ip=client_ip(request), username=request.POST.get("username", "")):
            form = self.get_form()
            form.add_error(None, "Too many failed attempts; try again in 15 minutes.")
            return self.render_to_response(self.get_context_data(form=form), status=429)
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form: Any) -> HttpResponse:
        login_failure_record(ip=client_ip(self.request), username=self.request.POST.get("username", ""))
        return super().form_invalid(form)


@login_required
def tokens_page(request: HttpRequest) -> HttpResponse:
    # Post/redirect/get: a reload after creating shows the page again instead of minting another
    # token. The new key rides in the session for exactly one GET, so it is still shown only once.
    if request.method == "POST":
        if request.POST.get("action") == "revoke":
            token = get_object_or_404(ApiToken, user=signed_in_user(request), pk=request.POST.get("token"))
            api_token_revoke(token=token)
            messages.info(request, f"Token {token.name} ({token.prefix}…) revoked.")
        else:
            try:
                _, request.session[NEW_KEY] = api_token_create(user=signed_in_user(request), name=request.POST.get("name", ""))
            except ServiceError as exc:
                messages.error(request, exc.message)
        return redirect(request.path)
    new_key = request.session.pop(NEW_KEY, None)
    tokens = ApiToken.objects.filter(user=signed_in_user(request))
    response = render(request, "accounts/tokens.html", {"tokens": tokens, "new_key": new_key})
    if new_key:
        response["Cache-Control"] = "no-store"  # the back button must not bring the key back from cache
    return response
