"""Expanding a sweep's search space into points (pure: no database)."""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

from apps.core.errors import FieldError

MAX_VALUES_PER_KEY = 100


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
            numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (low, high))
            if not numeric or low > high:  # type: ignore[operator]
                raise FieldError(f"params.space.{key}", "a range needs numbers min ≤ max")
            if values.get("log") and low <= 0:  # type: ignore[operator]
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
