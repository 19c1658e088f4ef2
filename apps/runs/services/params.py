"""Parameters checked against a template's JSON Schema, with errors a person can act on.

Errors name the field as "params.<key>" and the limit with the value that broke it, e.g.
"params.lr: must be ≤ 1.0 (got 5)". Unknown keys are refused even when the schema forgets
``additionalProperties: false``: a typo must not silently run with the default instead.

Rules across parameters that the recipe declares under ``x-divisible`` (see recipes.schema,
which the job itself checks with on start) are checked here too, so a run that would fail on
its first line is refused at submission with the numbers instead.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from apps.core.errors import ServiceError
from recipes.schema import JOB_QUANTITIES, Indivisible, ParamError, divisibility_violations, divisible_rules

log = logging.getLogger(__name__)


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


def _divisibility_errors(*, schema: dict[str, Any], params: dict[str, Any], world_size: int | None,
                         fields: dict[str, list[str]]) -> None:
    """Adds an error to every parameter of each ``x-divisible`` rule ``params`` break: any of them can fix it."""
    try:
        rules = divisible_rules(schema)
    except ParamError as err:
        # template_create refuses a malformed rule; one stored before that is not the submitter's fault.
        log.warning("ignoring the parameter schema's malformed rules: %s", err)
        return
    job = {"world_size": world_size} if world_size is not None else {}
    for broken in divisibility_violations(rules, params, job):
        if any(f"params.{name}" in fields for name in broken.params):
            continue  # a value already refused would only make this sentence confusing
        for name in broken.params:
            fields.setdefault(f"params.{name}", []).append(_indivisible_sentence(broken))


def _indivisible_sentence(broken: Indivisible) -> str:
    """E.g. "batch_size (64) must be divisible by world size × grad_accum (1 × 3 = 3; world size = nodes × devices_per_node)"."""
    names = " × ".join(JOB_QUANTITIES.get(name, name) for name, _ in broken.factors)
    numbers = " × ".join(str(value) for _, value in broken.factors)
    if len(broken.factors) > 1:
        numbers += f" = {broken.divisor}"
    if any(name in JOB_QUANTITIES for name, _ in broken.factors):
        numbers += "; world size = nodes × devices_per_node"
    return f"{broken.rule.param} ({broken.value}) must be divisible by {names} ({numbers})"


def _nested_unknown_keys(*, properties: dict[str, Any], params: Any, prefix: str, fields: dict[str, list[str]]) -> None:
    """Refuses unknown keys inside object parameters that declare their own ``properties``
    (a sweep's ``objective``), e.g. "params.objective.metrc: unknown key; allowed: goal, metric":
    a typo there would otherwise be dropped and the sweep optimise something else."""
    if not isinstance(params, dict):
        return
    for key, value in params.items():
        prop = properties.get(key)
        if not isinstance(prop, dict) or not isinstance(value, dict):
            continue
        inner = prop.get("properties")
        extra = prop.get("additionalProperties", False)
        if not isinstance(inner, dict) or extra is True or isinstance(extra, dict):
            continue  # a free-form object (a sweep's space or fixed params) names its own keys
        for name in value:
            if name not in inner:
                allowed = ", ".join(sorted(inner)) or "none"  # JSONB keeps no key order
                fields.setdefault(f"{prefix}.{key}.{name}", []).append(f"unknown key; allowed: {allowed}")
        _nested_unknown_keys(properties=inner, params=value, prefix=f"{prefix}.{key}", fields=fields)


def params_resolve(*, schema: dict[str, Any], params: dict[str, Any], world_size: int | None = None) -> dict[str, Any]:
    """``params`` with the schema's defaults filled in; ServiceError naming every bad key.

    ``world_size`` (nodes × devices per node) is what the submission asks for; without it the
    recipe's rules are checked for what every world size needs.
    """
    properties: dict[str, Any] = schema.get("properties", {}) if schema else {}
    fields: dict[str, list[str]] = {}
    for key in params:
        if key not in properties:
            allowed = ", ".join(sorted(properties)) or "none"
            fields.setdefault(f"params.{key}", []).append(f"unknown parameter (allowed: {allowed})")
    _nested_unknown_keys(properties=properties, params=params, prefix="params", fields=fields)
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
                continue  # reported above (at any depth), with the allowed names
            path = ".".join(str(part) for part in error.absolute_path)
            fields.setdefault(f"params.{path}" if path else "params", []).append(_describe(error))
        _divisibility_errors(schema=schema, params=resolved, world_size=world_size, fields=fields)
    if fields:
        summary = "; ".join(f"{field}: {msgs[0]}" for field, msgs in fields.items())
        raise ServiceError(f"Invalid parameters: {summary}", fields=fields)
    return resolved
