from __future__ import annotations

from typing import Any

from django.contrib.auth import authenticate
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import AnonRateThrottle
from rest_framework.views import APIView

from apps.accounts.models import ApiToken
from apps.accounts.services import api_token_create, api_token_revoke, login_failure_record, login_lockout_active
from apps.audit.middleware import client_ip
from apps.core.errors import NotFound, ServiceError
from apps.core.users import signed_in_user


class LockedOut(ServiceError):
    status_code = 429
    code = "locked_out"


class TokenThrottle(AnonRateThrottle):
    """Failed password checks per address: a burst of correct logins behind one address (a
    team's NAT, a CI fleet) must not lock its other users out. A request is refused once the
    address has `rate` failures in the window; only ObtainTokenView's failures are counted, in
    the shared cache, so every web process sees them."""

    scope = "token"

    def allow_request(self, request: Any, view: Any) -> bool:
        limit, window = self._limit()
        self.key = self.get_cache_key(request, view)
        if not limit or self.key is None:
            return True
        self.now = self.timer()
        self.history = [at for at in self.cache.get(self.key, []) if at > self.now - window]
        return self.throttle_failure() if len(self.history) >= limit else True

    def failure_record(self, request: Any, view: Any) -> None:
        limit, window = self._limit()
        key = self.get_cache_key(request, view)
        if not limit or key is None:
            return
        now = self.timer()
        history = [at for at in self.cache.get(key, []) if at > now - window]
        self.cache.set(key, [now, *history][:limit + 1], window)

    def _limit(self) -> tuple[int, int]:
        """(failures allowed, window in seconds); (0, 0) when unthrottled."""
        count, window = self.parse_rate(self.rate)
        return int(count or 0), int(window or 0)


class TokenRequest(serializers.Serializer[Any]):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=256, style={"input_type": "password"})
    name = serializers.CharField(max_length=100, required=False, default="api", help_text="A label for the token.")


class TokenSerializer(serializers.ModelSerializer[ApiToken]):
    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "created_at", "last_used_at", "revoked_at"]


class ObtainTokenView(APIView):
    """Exchange a username and password for a new API token (shown once)."""

    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    throttle_classes = [TokenThrottle]

    @extend_schema(
        request=TokenRequest,
        responses={201: inline_serializer("TokenResponse", {"token": serializers.CharField(), "id": serializers.IntegerField()})},
    )
    def post(self, request: Request) -> Response:
        data = TokenRequest(data=request.data)
        data.is_valid(raise_exception=True)
        username, ip = data.validated_data["username"], client_ip(request._request)
        # The same lockout as the login form: a script must not get unlimited password guesses.
        if login_lockout_active(ip=ip, username=username):
            raise LockedOut("Too many failed attempts for this user from your address; try again in 15 minutes.")
        user = authenticate(request._request, username=username, password=data.validated_data["password"])
        if user is None:
            login_failure_record(ip=ip, username=username)
            TokenThrottle().failure_record(request, self)
            raise ServiceError("Wrong username or password.", code="invalid_credentials")
        token, key = api_token_create(user=user, name=data.validated_data["name"])
        return Response({"token": key, "id": token.pk}, status=status.HTTP_201_CREATED)


class TokenListView(APIView):
    """Your API tokens (never the keys themselves)."""

    permission_classes = [IsAuthenticated]

    @extend_schema(responses={200: TokenSerializer(many=True)})
    def get(self, request: Request) -> Response:
        tokens = ApiToken.objects.filter(user=signed_in_user(request))
        return Response(TokenSerializer(tokens, many=True).data)


class TokenRevokeView(APIView):
    permission_classes = [IsAuthenticated]

    @extend_schema(request=None, responses={204: None})
    def delete(self, request: Request, pk: int) -> Response:
        token = ApiToken.objects.filter(user=signed_in_user(request), pk=pk).first()
        if token is None:
            raise NotFound("Not found.")
        api_token_revoke(token=token)
        return Response(status=status.HTTP_204_NO_CONTENT)
