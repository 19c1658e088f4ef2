"""A pool's scheduler options (NodePool.policy, JSON) read into `Policy`, and checked on save."""

from __future__ import annotations

import dataclasses
import difflib
import math
from typing import Any

from apps.scheduling import model as core


def _policy_value(key: str, value: Any, default: Any) -> Any:
    """`value` read as Policy's field `key`, or ValueError naming the field and what it takes."""
    if key in ("ordering", "packing"):
        kind = core.Ordering if key == "ordering" else core.Packing
        if value not in {k.value for k in kind}:
            raise ValueError(f"{key} must be one of {', '.join(k.value for k in kind)}")
        return kind(value)
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ValueError(f"{key} must be true or false")
        return value
    # 0 turns off the options that are off by default (a cap, levels, headroom); others start at 1.
    floor = 0 if default == 0 else 1
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) or value < floor:
            raise ValueError(f"{key} must be a whole number of at least {floor}")
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{key} must be a number of at least 0")
    return float(value)


def policy_error(raw: Any) -> str | None:
    """What is wrong with a pool's policy JSON (the first problem, naming the key), or None."""
    if not isinstance(raw, dict):
        return "policy must be a JSON object of scheduler options, e.g. {\"max_preemptions\": 10}"
    kinds = {f.name: f.default for f in dataclasses.fields(core.Policy)}
    for key, value in raw.items():
        if key not in kinds:
            close = difflib.get_close_matches(str(key), kinds, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(sorted(kinds))}"
            return f"unknown scheduler option {key!r}{hint}"
        try:
            _policy_value(key, value, kinds[key])
        except ValueError as err:
            return str(err)
    return None


def policy_from_json(raw: Any) -> core.Policy:
    """A pool's policy from NodePool.policy; unknown keys and bad values fall back to defaults
    (saving a pool refuses them, `policy_error`; this reads what older versions let through)."""
    if not isinstance(raw, dict):
        return core.Policy()
    kinds = {f.name: f.default for f in dataclasses.fields(core.Policy)}
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in kinds:
            continue
        try:
            kwargs[key] = _policy_value(key, value, kinds[key])
        except ValueError:
            continue
    return core.Policy(**kwargs)
