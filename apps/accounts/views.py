from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from apps.accounts.models import ApiToken
from apps.accounts.services import api_token_create, api_token_revoke, login_failure_record, login_lockout_active
from apps.audit.middleware import client_ip
from apps.core.errors import ServiceError
from apps.core.users import signed_in_user


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
