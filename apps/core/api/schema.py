"""The OpenAPI schema's shared parts: the one error body, and the errors each operation can answer.

Every API error goes through apps.core.errors (``{"error": {"status", "code", "message",
"fields"}}``), so instead of repeating the error responses on each view, :class:`ApiAutoSchema`
adds them from what the operation is: 401/403 when it needs credentials, 404 when the path names
an object (or the list is paginated: a page past the end), 400 when it takes input, 409 for
writes (state conflicts), 429 when throttled, 503 for a database outage, and 304 for GETs (the
ETag of apps.core.conditional). A view's own ``extend_schema(responses=...)`` wins.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiResponse
from rest_framework import permissions, serializers

GENERIC_OBJECT = {"type": "object", "additionalProperties": {}}


class ApiErrorDetailSerializer(serializers.Serializer[Any]):
    status = serializers.IntegerField(help_text="The HTTP status again, for logs that keep only the body.")
    code = serializers.CharField(help_text="Machine-readable reason: invalid, not_found, conflict, not_authenticated, "
                                 "permission_denied, throttled, database_unavailable, or a more specific one.")
    message = serializers.CharField(help_text="For humans: names the field, the limit and the figures where that applies.")

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        # Declared here, not as a class attribute: `fields` is a property of every serializer.
        fields = super().get_fields()
        fields["fields"] = serializers.DictField(
            child=serializers.ListField(child=serializers.CharField()),
            help_text="Per-field messages for bad input (the field's name, dotted for nested ones); empty otherwise.",
        )
        return fields


class ApiErrorSerializer(serializers.Serializer[Any]):
    error = ApiErrorDetailSerializer()


ERROR_DESCRIPTIONS = {
    "400": "Bad input: `fields` names each bad field (query parameter or body field) and its limit.",
    "401": "No credentials, or a wrong or revoked token.",
    "403": "Your role may not do this (or a session write without its CSRF token).",
    "404": "No such object, or one of another team's (never revealed), or a page past the end.",
    "409": "The object is in a state where this does not apply (e.g. the run already finished).",
    "429": "Too many requests; retry after the Retry-After header's seconds.",
    "503": "The database is unavailable; nothing was changed. Retry after the Retry-After header's seconds.",
}
NOT_MODIFIED = "Not modified: the If-None-Match header matched the response's ETag (no body)."


class ApiAutoSchema(AutoSchema):
    def get_operation(self, *args: Any, **kwargs: Any) -> Any:
        operation = super().get_operation(*args, **kwargs)
        if operation is None or not self.path.startswith("/api/"):
            return operation
        responses: dict[str, Any] = operation.setdefault("responses", {})
        for code in self._error_codes(operation):
            current = responses.get(code)
            if current is None or self._is_generic(current):
                responses[code] = self._get_response_for_code(
                    OpenApiResponse(ApiErrorSerializer, description=ERROR_DESCRIPTIONS[code]), code)
        if self.method == "GET" and "304" not in responses and not self._is_binary(responses):
            responses["304"] = {"description": NOT_MODIFIED}
        operation["responses"] = dict(sorted(responses.items()))
        return operation

    def _error_codes(self, operation: dict[str, Any]) -> list[str]:
        view = self.view
        open_to_all = any(p is permissions.AllowAny for p in getattr(view, "permission_classes", []))
        query = [p for p in operation.get("parameters", []) if p.get("in") == "query"]
        writes = self.method not in ("GET", "HEAD", "OPTIONS")
        codes = ["503"]
        if not open_to_all and getattr(view, "authentication_classes", None):
            codes += ["401", "403"]
        if "{" in self.path or any(p["name"] == "page" for p in query):
            codes.append("404")
        if query or (writes and self.method != "DELETE"):
            codes.append("400")
        if writes:
            codes.append("409")
        if getattr(view, "throttle_classes", None):
            codes.append("429")
        return sorted(codes)

    @staticmethod
    def _is_generic(response: dict[str, Any]) -> bool:
        content = response.get("content") or {}
        return any(media.get("schema") == GENERIC_OBJECT for media in content.values())

    @staticmethod
    def _is_binary(responses: dict[str, Any]) -> bool:
        content = (responses.get("200") or {}).get("content") or {}
        return bool(content) and "application/json" not in content
