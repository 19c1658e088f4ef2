"""Expanding a sweep's search space into points (pure: no database)."""

from __future__ import annotations

import itertools
import math
import random
from typing import Any, TypeGuard

from apps.core.errors import FieldError
from apps.runs.services.params import params_resolve

MAX_VALUES_PER_KEY = 100
# Half a float's range, so that max - min is finite too.
MAX_RANGE = 1e307


def _sampleable(low: Any, high: Any) -> bool:
    """Whether uniform sampling stays finite: a JSON int past a float's range overflows, and a
    range wider than a float's makes every sample inf."""
    try:
        return abs(float(low)) <= MAX_RANGE and abs(float(high)) <= MAX_RANGE
    except OverflowError:
        return False


def _short(number: Any) -> str:
    text = repr(number)
    return text if len(text) <= 24 else f"{text[:12]}…({len(text)} digits)"


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_space(space: Any, strategy: str) -> None:
    if not isinstance(space, dict) or not space:
        raise FieldError("params.space", "must be a non-empty object of parameter -> values")
    for key, values in space.items():
        if isinstance(values, list):
            if not values:
                raise FieldError(f"params.space.{key}", "needs at least one value")
            if len(values) > MAX_VALUES_PER_KEY:
                raise FieldError(f"params.space.{key}", f"must have at most {MAX_VALUES_PER_KEY} values (got {len(values)})")
            continue
        if strategy == "random" and isinstance(values, dict):
            low, high = values.get("min"), values.get("max")
            if not (_is_number(low) and _is_number(high)) or low > high:
                raise FieldError(f"params.space.{key}", "a range needs numbers min ≤ max")
            if not _sampleable(low, high):
                raise FieldError(f"params.space.{key}", f"a range must lie within ±{MAX_RANGE:g} (got {_short(low)} to {_short(high)})")
            if values.get("log") and low <= 0:
                raise FieldError(f"params.space.{key}", "a log range needs min > 0")
            continue
        raise FieldError(f"params.space.{key}", "must be a list of values" + (" or {min, max, log}" if strategy == "random" else ""))


def _sample(rng: random.Random, spec: Any) -> Any:
    if isinstance(spec, list):
        return rng.choice(spec)
    low, high = spec["min"], spec["max"]
    if spec.get("log"):
        value: float = math.exp(rng.uniform(math.log(low), math.log(high)))
    else:
        value = rng.uniform(low, high)
    if isinstance(low, int) and isinstance(high, int) and not spec.get("log") or spec.get("integer"):
        return int(round(value))
    return value


def sweep_points(*, strategy: str, space: dict[str, Any], max_runs: int, seed: int) -> list[dict[str, Any]]:
    """grid: every combination (refused if more than max_runs); random: max_runs seeded samples."""
    _check_space(space, strategy)
    keys = sorted(space)
    if strategy == "grid":
        size = math.prod(len(space[key]) for key in keys)
        if size > max_runs:
            raise FieldError("params.max_runs", f"the grid has {size} points, more than max_runs {max_runs}")
        return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(space[key] for key in keys))]
    rng = random.Random(seed)
    return [{key: _sample(rng, space[key]) for key in keys} for _ in range(max_runs)]


def sweep_trial_count(*, schema: dict[str, Any], params: dict[str, Any]) -> int:
    """How many trials (child runs) a sweep with ``params`` queues: what the submission counts,
    so a cost shown before submitting is the one the budget will see. ServiceError names a bad field."""
    sweep = params_resolve(schema=schema, params=params)
    points = sweep_points(strategy=sweep.get("strategy", "grid"), space=sweep.get("space") or {}, max_runs=sweep.get("max_runs", 1),
                          seed=sweep.get("seed", 0))
    return len(points)
