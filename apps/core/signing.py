"""The one signature scheme of every webhook the portal sends (budget alerts, project events):
receivers verify them all the same way (docs: webhook_verify in apps.webhooks.services)."""

from __future__ import annotations

import hashlib
import hmac


def webhook_sign(*, secret: str, timestamp: int, body: bytes) -> str:
    """The X-Trainyard-Signature value: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"
