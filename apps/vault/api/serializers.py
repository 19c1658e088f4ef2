from __future__ import annotations

from typing import Any

from rest_framework import serializers


class SecretSerializer(serializers.Serializer[Any]):
    """What the API shows of a secret: never its value."""

    name = serializers.CharField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    updated_by = serializers.SerializerMethodField()

    def get_updated_by(self, obj: Any) -> str:
        return obj.updated_by.get_username() if obj.updated_by_id and obj.updated_by else ""


class SecretWriteSerializer(serializers.Serializer[Any]):
    """Shape only; apps.vault.services checks the name and the value's length."""

    name = serializers.CharField(required=False, help_text="Environment variable name, e.g. HF_TOKEN (POST only).")
    value = serializers.CharField(write_only=True, trim_whitespace=False, style={"input_type": "password"},
                                  help_text="The secret; stored encrypted and never shown again.")
