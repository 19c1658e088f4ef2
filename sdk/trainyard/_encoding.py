"""How the in-job SDK writes numbers, metric keys and JSON: strict JSON, non-finite floats as
the strings "NaN", "Infinity" and "-Infinity" (the protocol in :mod:`trainyard.job`).

Standard library only, like the rest of the in-job SDK.
"""

from __future__ import annotations

import contextlib
import json
import math
import operator
import os
import time
from collections.abc import Mapping
from typing import Any, SupportsFloat, SupportsIndex, cast

MAX_KEY_LENGTH = 200
_KEY_CACHE_SIZE = 4096

# What a metric value may be once encoded: a number, or one of the three non-finite strings.
MetricValue = int | float | str


def encode_float(value: float) -> float | str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def decode_number(value: object) -> float | int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return value
    if value == "NaN":
        return math.nan
    if value == "Infinity":
        return math.inf
    if value == "-Infinity":
        return -math.inf
    return None


def metric_value(key: str, value: object) -> MetricValue:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return encode_float(value)
    if isinstance(value, str | bytes) or not hasattr(type(value), "__float__"):
        raise TypeError(f"metric {key!r} must be a number, not {type(value).__name__}")
    if hasattr(type(value), "__index__"):
        # Integer numpy scalars and integer tensors stay ints; float tensors refuse __index__.
        with contextlib.suppress(TypeError):
            return operator.index(cast(SupportsIndex, value))  # has __index__ (checked above)
    # numpy scalars, 0-d tensors and the like: anything that knows how to become a float.
    try:
        number = float(cast(SupportsFloat, value))  # has __float__ (checked above)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise TypeError(f"metric {key!r} cannot be turned into a number: {exc}") from exc
    return encode_float(number)


def check_key(key: object) -> str:
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_LENGTH:
        raise ValueError(f"metric keys must be non-empty strings of at most {MAX_KEY_LENGTH} characters, got {key!r}")
    return key


def encode_metrics(metrics: Mapping[str, object]) -> dict[str, MetricValue]:
    return {check_key(key): metric_value(key, value) for key, value in metrics.items()}


def json_key(key: object, cache: dict[str, str]) -> str:
    """``key`` as a JSON string literal, validated once and then remembered."""
    literal = cache.get(key) if isinstance(key, str) else None
    if literal is None:
        literal = json.dumps(check_key(key))
        if len(cache) < _KEY_CACHE_SIZE:
            cache[cast(str, key)] = literal
    return literal


def metrics_line(step: int, metrics: Mapping[str, object], keys: dict[str, str]) -> str:
    """One metrics.jsonl line, built by hand: this is the hot path of a training loop.

    json.dumps of a small dict costs several microseconds; formatting the common cases
    (float and int values, already-seen keys) directly is about half that, and gives the
    same strict JSON (``repr`` of a finite float is a valid JSON number and round-trips).
    """
    parts = []
    for key, value in metrics.items():
        kind = type(value)
        if kind is float:
            number = cast(float, value)
            text = repr(number) if number - number == 0.0 else dumps(encode_float(number))
        elif kind is int:
            text = str(value)
        else:
            text = dumps(metric_value(str(key), value))
        parts.append(json_key(key, keys) + ":" + text)
    return f'{{"step":{step},"time":{time.time()!r},"metrics":{{{",".join(parts)}}}}}\n'


def encode_json(value: object, where: str) -> Any:
    """A strict-JSON copy of ``value``: non-finite floats as strings, paths as strings."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return encode_float(value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{where}: keys must be strings, got {key!r}")
            out[key] = encode_json(item, f"{where}.{key}")
        return out
    if isinstance(value, list | tuple):
        return [encode_json(item, f"{where}[{i}]") for i, item in enumerate(value)]
    raise TypeError(f"{where}: {type(value).__name__} is not JSON-serialisable")


def dumps(obj: object) -> str:
    return json.dumps(obj, allow_nan=False, separators=(",", ":"))


def as_step(step: object, name: str = "step") -> int:
    if isinstance(step, bool):
        raise TypeError(f"{name} must be an int, not bool")
    try:
        value = operator.index(cast(SupportsIndex, step))  # anything else raises TypeError
    except TypeError:
        raise TypeError(f"{name} must be an int, not {type(step).__name__}") from None
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return value
