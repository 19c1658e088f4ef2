"""Checking a recipe's parameters against its PARAM_SCHEMA, with errors as plain sentences.

Standard library only, so a schema check never has to load torch.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any


class ParamError(ValueError):
    """The run's parameters do not fit the recipe's schema."""


def _type_ok(kind: str, value: object) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(float(value))
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind == "array":
        return isinstance(value, list)
    if kind == "null":
        return value is None
    raise ParamError(f"schema uses unsupported type {kind!r}")


def _coerce(schema: Mapping[str, Any], value: Any) -> Any:
    """JSON Schema counts 3.0 as an integer; make it the int the recipe code expects."""
    kinds = schema.get("type")
    allowed = [kinds] if isinstance(kinds, str) else list(kinds or [])
    if "integer" in allowed and isinstance(value, float) and value.is_integer():
        return int(value)
    item_schema = schema.get("items")
    if isinstance(value, list) and isinstance(item_schema, Mapping):
        return [_coerce(item_schema, item) for item in value]
    return value


def _check_value(name: str, schema: Mapping[str, Any], value: object) -> list[str]:
    """The subset of JSON Schema the recipes' PARAM_SCHEMA uses; errors as plain sentences."""
    kinds = schema.get("type")
    if kinds is not None:
        allowed = [kinds] if isinstance(kinds, str) else list(kinds)
        if not any(_type_ok(kind, value) for kind in allowed):
            return [f"{name} must be of type {' or '.join(allowed)}, got {value!r}"]
    errors: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{name} must be one of {schema['enum']}, got {value!r}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{name} must be >= {schema['minimum']}, got {value}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{name} must be <= {schema['maximum']}, got {value}")
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            errors.append(f"{name} must be > {schema['exclusiveMinimum']}, got {value}")
        if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
            errors.append(f"{name} must be < {schema['exclusiveMaximum']}, got {value}")
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            errors.append(f"{name} needs at least {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{name} takes at most {schema['maxItems']} items")
        if schema.get("uniqueItems") and len(set(map(repr, value))) != len(value):
            errors.append(f"{name} must not repeat items")
        item_schema = schema.get("items")
        if isinstance(item_schema, Mapping):
            for i, item in enumerate(value):
                errors.extend(_check_value(f"{name}[{i}]", item_schema, item))
    return errors


def check_batch_layout(params: Mapping[str, Any], world_size: int) -> None:
    """The global batch must split evenly over ranks and then over micro-batches."""
    batch_size, grad_accum = params["batch_size"], params["grad_accum"]
    if batch_size % (world_size * grad_accum) != 0:
        raise ParamError(f"batch_size ({batch_size}) must be divisible by world size x grad_accum ({world_size} x {grad_accum})")


def resolve_params(schema: Mapping[str, Any], raw: Mapping[str, Any]) -> dict[str, Any]:
    """``raw`` with the schema's defaults filled in, checked against the schema.

    The server validates params with the template's schema before a run starts; checking again
    here catches hand-run jobs and gives a readable error instead of a traceback.
    """
    properties: Mapping[str, Mapping[str, Any]] = schema["properties"]
    errors = [f"unknown parameter {name!r}" for name in raw if name not in properties]
    resolved: dict[str, Any] = {}
    for name, prop in properties.items():
        value = _coerce(prop, copy.deepcopy(raw[name] if name in raw else prop.get("default")))
        errors.extend(_check_value(name, prop, value))
        resolved[name] = value
    if errors:
        raise ParamError("; ".join(errors))
    return resolved
