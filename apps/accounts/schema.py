"""Documents the token scheme in the OpenAPI schema."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiTokenScheme(OpenApiAuthenticationExtension):
    target_class = "apps.accounts.authentication.ApiTokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "`Token <key>`; get a key from POST /api/v1/auth/token/ or the API tokens page.",
        }


class NodeCredentialScheme(OpenApiAuthenticationExtension):
    """Agent endpoints (apps.nodes.auth); documented here so every scheme is in one place."""

    target_class = "apps.nodes.auth.NodeAuthentication"
    name = "nodeAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "`Node <credential>`: the per-node credential an agent gets from the register endpoint.",
        }
