"""Checking a recipe's parameters against its PARAM_SCHEMA, with errors as plain sentences.

Standard library only, so a schema check never has to load torch, and so the portal can read
the same rules (``divisible_rules``, ``divisibility_violations``) to refuse a submission up front
instead of queueing a run that fails on its first line.

Rules across parameters, which JSON Schema cannot say, sit under the schema's ``x-divisible``
keyword (JSON Schema ignores unknown keywords)::

    "x-divisible": [{"param": "batch_size", "by": ["world_size", "grad_accum"]}]

reads "batch_size must be a multiple of world_size x grad_accum". ``by`` names parameters or
``JOB_QUANTITIES``: facts of the job's shape that a job knows when it starts and the portal
knows from the resources a submission asks for (world size = nodes x devices per node).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
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


DIVISIBLE = "x-divisible"
# Job quantities a rule may divide by, with the words an error uses for them.
JOB_QUANTITIES = {"world_size": "world size"}


@dataclass(frozen=True)
class DivisibleRule:
    """``param`` must be a multiple of the product of ``by`` (parameters or job quantities)."""

    param: str
    by: tuple[str, ...]


@dataclass(frozen=True)
class Indivisible:
    """A broken rule, with the numbers: ``value`` is not a multiple of the product of ``factors``."""

    rule: DivisibleRule
    value: int
    factors: tuple[tuple[str, int], ...]  # (name, value) of each factor that was known

    @property
    def divisor(self) -> int:
        return math.prod(value for _, value in self.factors)

    @property
    def params(self) -> tuple[str, ...]:
        """The parameters involved: changing any of them can fix it."""
        return (self.rule.param, *(name for name in self.rule.by if name not in JOB_QUANTITIES))

    def sentence(self) -> str:
        names = " x ".join(JOB_QUANTITIES.get(name, name) for name, _ in self.factors)
        values = " x ".join(str(value) for _, value in self.factors)
        return f"{self.rule.param} ({self.value}) must be divisible by {names} ({values})"


# The split the training loop (recipes.common.train) relies on, whatever the schema says.
BATCH_LAYOUT = DivisibleRule(param="batch_size", by=("world_size", "grad_accum"))


def divisible_rules(schema: Mapping[str, Any]) -> list[DivisibleRule]:
    """The schema's ``x-divisible`` rules; ParamError naming the first malformed one."""
    raw = schema.get(DIVISIBLE, [])
    properties = schema.get("properties", {})
    if not isinstance(raw, list):
        raise ParamError(f"{DIVISIBLE} must be a list of {{\"param\", \"by\"}} objects")
    rules = []
    for index, item in enumerate(raw):
        where = f"{DIVISIBLE}[{index}]"
        if not isinstance(item, Mapping) or set(item) != {"param", "by"}:
            raise ParamError(f"{where} must be an object with exactly the keys param and by")
        param, by = item["param"], item["by"]
        if not isinstance(param, str) or param not in properties:
            raise ParamError(f"{where}.param must name a parameter of the schema (got {param!r})")
        if not isinstance(by, list) or not by:
            raise ParamError(f"{where}.by must be a non-empty list of names")
        for name in by:
            if not isinstance(name, str) or (name not in properties and name not in JOB_QUANTITIES):
                known = ", ".join(sorted(JOB_QUANTITIES))
                raise ParamError(f"{where}.by: {name!r} is neither a parameter of the schema nor one of {known}")
        rules.append(DivisibleRule(param=param, by=tuple(by)))
    return rules


def _positive_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def divisibility_violations(rules: Iterable[DivisibleRule], params: Mapping[str, Any],
                            job: Mapping[str, int]) -> list[Indivisible]:
    """The rules ``params`` break, given the job quantities in ``job``.

    A rule whose parameters are not positive integers is skipped: the type and bound checks
    report those. A job quantity missing from ``job`` is left out of the product, which still
    checks what any job size needs (a multiple of world size x g is a multiple of g).
    """
    broken = []
    for rule in rules:
        value = _positive_int(params.get(rule.param))
        factors: list[tuple[str, int]] = []
        complete = value is not None
        for name in rule.by:
            if name in JOB_QUANTITIES:
                if name in job:
                    factors.append((name, job[name]))
                continue
            factor = _positive_int(params.get(name))
            if factor is None:
                complete = False
                break
            factors.append((name, factor))
        if not complete or value is None or not factors:
            continue
        if value % math.prod(v for _, v in factors) != 0:
            broken.append(Indivisible(rule=rule, value=value, factors=tuple(factors)))
    return broken


def check_divisible(schema: Mapping[str, Any], params: Mapping[str, Any], *, world_size: int) -> None:
    """ParamError unless ``params`` keep every ``x-divisible`` rule of ``schema`` at this world size."""
    broken = divisibility_violations(divisible_rules(schema), params, {"world_size": world_size})
    if broken:
        raise ParamError("; ".join(b.sentence() for b in broken))


def check_batch_layout(params: Mapping[str, Any], world_size: int) -> None:
    """The global batch must split evenly over ranks and then over micro-batches."""
    broken = divisibility_violations([BATCH_LAYOUT], params, {"world_size": world_size})
    if broken:
        raise ParamError(broken[0].sentence())


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
