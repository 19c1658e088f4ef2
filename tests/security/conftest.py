from __future__ import annotations

from collections.abc import Iterator

import pytest
from cryptography.fernet import Fernet
from django.test import override_settings

KEY_A = Fernet.generate_key().decode()
KEY_B = Fernet.generate_key().decode()


@pytest.fixture
def vault_keys() -> Iterator[list[str]]:
    """A production-like key list (DEBUG is off in tests, so the vault needs real keys)."""
    with override_settings(TRAINYARD_SECRET_KEYS=[KEY_A]):
        yield [KEY_A]
