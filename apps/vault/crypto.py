"""Encryption of secret values at rest: Fernet tokens under a rotatable key list (MultiFernet).

Keys come from TRAINYARD_SECRET_KEYS (comma-separated Fernet keys, newest first): new values are
encrypted with the first, any listed key decrypts, and `manage.py rotate_secrets` re-encrypts
every stored value with the newest so an old key can then be dropped. Only a DEBUG deployment
may run without keys; it gets one derived from SECRET_KEY so `make run` works out of the box.
"""

from __future__ import annotations

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

KEYS_SETTING = "TRAINYARD_SECRET_KEYS"


class VaultKeyError(Exception):
    """A stored value cannot be decrypted with any configured key (a key was dropped too early)."""


def development_key(secret_key: str | None = None) -> bytes:
    """A stable Fernet key derived from SECRET_KEY (or `secret_key`); used only when DEBUG and no
    keys are set, and by `make run` (portal.launch), which runs with DEBUG off."""
    digest = hashlib.sha256(b"trainyard-vault:" + (secret_key or settings.SECRET_KEY).encode()).digest()
    return base64.urlsafe_b64encode(digest)


def configured_keys() -> list[bytes]:
    raw = getattr(settings, KEYS_SETTING, None) or []
    if isinstance(raw, str):
        raw = [part for part in raw.split(",")]
    keys = [k.strip().encode() for k in raw if k and k.strip()]
    for position, key in enumerate(keys, start=1):
        try:
            Fernet(key)
        except ValueError as exc:
            # Name the position, never the value: settings errors end up in logs.
            raise ImproperlyConfigured(f"{KEYS_SETTING}: key #{position} is not a valid Fernet key "
                                       "(32 url-safe base64-encoded bytes)") from exc
    return keys


def keys_or_default() -> list[bytes]:
    keys = configured_keys()
    if keys:
        return keys
    if settings.DEBUG:
        return [development_key()]
    raise ImproperlyConfigured(f"{KEYS_SETTING} must be set (comma-separated Fernet keys, newest first) when DEBUG is off")


def _fernet() -> MultiFernet:
    return MultiFernet([Fernet(k) for k in keys_or_default()])


def encrypt(value: str) -> str:
    return _fernet().encrypt(value.encode()).decode("ascii")


def decrypt(token: str) -> str:
    try:
        return _fernet().decrypt(token.encode("ascii")).decode()
    except InvalidToken as exc:
        raise VaultKeyError("no configured key decrypts this secret; was its key removed before rotate_secrets ran?") from exc


def rotate(token: str) -> str:
    """The same value encrypted with the newest key."""
    try:
        return _fernet().rotate(token.encode("ascii")).decode("ascii")
    except InvalidToken as exc:
        raise VaultKeyError("no configured key decrypts this secret") from exc


def key_fingerprint(key: bytes | None = None) -> str:
    """A short, non-reversible id of a key, so the row says which key encrypted it."""
    key = key if key is not None else keys_or_default()[0]
    return hashlib.sha256(b"trainyard-vault-fp:" + key).hexdigest()[:12]
