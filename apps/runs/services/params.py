"""Parameters checked against a template's JSON Schema, with errors a person can act on.

Errors name the field as "params.<key>" and the limit with the value that broke it, e.g.
"params.lr: must be ≤ 1.0 (got 5)". Unknown keys are refused even when the schema forgets
``additionalProperties: false``: a typo must not silently run with the default instead.
"""

from __future__ import annotations

import copy
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from apps.core.errors import ServiceError


def _describe(error: ValidationError) -> str:
    got = error.instance
    limit = error.validator_value
    match error.validator:
        case "maximum":
            return f"must be ≤ {limit} (got {got!r})"
        case "minimum":
            return f"must be ≥ {limit} (got {got!r})"
        case "exclusiveMaximum":
            return f"must be < {limit} (got {got!r})"
        case "exclusiveMinimum":
            return f"must be > {limit} (got {got!r})"
        case "type":
            kinds = limit if isinstance(limit, str) else " or ".join(limit)
            return f"must be of type {kinds} (got {type(got).__name__} {got!r})"
        case "enum":
            return f"must be one of {', '.join(map(repr, limit))} (got {got!r})"
        case "const":
            return f"must be {limit!r} (got {got!r})"
        case "maxLength":
            return f"must be at most {limit} characters (got {len(got)})"
        case "minLength":
            return f"must be at least {limit} characters (got {len(got)})"
        case "maxItems":
            return f"must have at most {limit} items (got {len(got)})"
        case "minItems":
            return f"must have at least {limit} items (got {len(got)})"
        case "pattern":
            return f"must match {limit} (got {got!r})"
        case "multipleOf":
            return f"must be a multiple of {limit} (got {got!r})"
    return error.message


def params_resolve(*, schema: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with the schema's defaults filled in; ServiceError naming every bad key."""
    properties: dict[str, Any] = schema.get("properties", {}) if schema else {}
    fields: dict[str, list[str]] = {}
    for key in params:
        if key not in properties:
            allowed = ", ".join(sorted(properties)) or "none"
            fields.setdefault(f"params.{key}", []).append(f"unknown parameter (allowed: {allowed})")
    resolved = {key: value for key, value in params.items() if key in properties}
    for key, prop in properties.items():
        if key not in resolved and isinstance(prop, dict) and "default" in prop:
            resolved[key] = copy.deepcopy(prop["default"])
    if schema:
        for error in Draft202012Validator(schema).iter_errors(resolved):
            if error.validator == "required":
                missing = next((name for name in error.validator_value if name not in (error.instance or {})), "")
                fields.setdefault(f"params.{missing}", []).append("is required")
                continue
            if error.validator == "additionalProperties":
                continue  # reported above, with the allowed names
            path = ".".join(str(part) for part in error.absolute_path)
            fields.setdefault(f"params.{path}" if path else "params", []).append(_describe(error))
    if fields:
        summary = "; ".join(f"{field}: {msgs[0]}" for field, msgs in fields.items())
        raise ServiceError(f"Invalid parameters: {summary}", fields=fields)
    return resolved
