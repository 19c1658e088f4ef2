"""`check --deploy` refuses a production deployment whose secrets would be unreadable or
encrypted with a key derived from SECRET_KEY."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from apps.vault.crypto import KEYS_SETTING, configured_keys


def vault_keys_check(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    try:
        keys = configured_keys()
    except ImproperlyConfigured as err:
        return [checks.Error(str(err), id="vault.E002")]
    if not keys and not settings.DEBUG:
        return [checks.Error(f"{KEYS_SETTING} is not set: project secrets cannot be stored or read",
                             hint="Generate one with: python -c 'from cryptography.fernet import Fernet; "
                                  "print(Fernet.generate_key().decode())'", id="vault.E001")]
    return []


def register() -> None:
    checks.register(vault_keys_check, checks.Tags.security, deploy=True)
