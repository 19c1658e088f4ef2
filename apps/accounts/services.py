from __future__ import annotations

import hashlib
import secrets

from django.contrib.auth.models import User
from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from apps.accounts.models import ApiToken
from apps.audit.services import audit_record

# User keys start with "ty_"; agent credentials use another prefix, so neither can be
# mistaken for the other even before the lookup.
USER_TOKEN_PREFIX = "ty_"
MAX_ACTIVE_TOKENS = 50
# Failed password checks per address and username (login form and token endpoint together)
# before both refuse that pair for the window. The cache must be shared by every web process
# (production.py points it at Redis) or each process would count on its own.
LOGIN_LIMIT = 10
LOGIN_WINDOW_S = 15 * 60


def _login_key(ip: str | None, username: str) -> str:
    return f"login-fail:{ip}:{username[:150].lower()}"


def login_lockout_active(*, ip: str | None, username: str) -> bool:
    return int(cache.get(_login_key(ip, username), 0)) >= LOGIN_LIMIT


def login_failure_record(*, ip: str | None, username: str) -> None:
    key = _login_key(ip, username)
    # add+incr is atomic on shared caches; get+set would lose counts under concurrent guesses.
    cache.add(key, 0, LOGIN_WINDOW_S)
    try:
        cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.set(key, 1, LOGIN_WINDOW_S)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@transaction.atomic
def api_token_create(*, user: User, name: str) -> tuple[ApiToken, str]:
    from apps.core.errors import FieldError

    name = name.strip() or "token"
    if len(name) > 100:
        raise FieldError("name", "at most 100 characters")
    if ApiToken.objects.filter(user=user, revoked_at__isnull=True).count() >= MAX_ACTIVE_TOKENS:
        raise FieldError("name", f"you already have {MAX_ACTIVE_TOKENS} active tokens; revoke one first")
    key = USER_TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(user=user, name=name, prefix=key[:10], key_hash=hash_key(key))
    audit_record(action="api_token.create", target=token, actor=user, after={"name": name, "prefix": token.prefix})
    return token, key


@transaction.atomic
def api_token_revoke(*, token: ApiToken) -> None:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        audit_record(action="api_token.revoke", target=token, after={"prefix": token.prefix})


def api_token_user(*, key: str) -> User | None:
    if not key.startswith(USER_TOKEN_PREFIX):
        return None
    token = ApiToken.objects.select_related("user").filter(key_hash=hash_key(key), revoked_at__isnull=True).first()
    if token is None or not token.user.is_active:
        return None
    now = timezone.now()
    # Throttle the write: one update a minute per token is enough to show "last used".
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token.user
