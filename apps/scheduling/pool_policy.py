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


# Every option with its default: what a key is read as, and the list of known keys.
_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(core.Policy)}


def policy_read(raw: Any) -> tuple[core.Policy, list[str]]:
    """A pool's policy JSON read once: the `Policy` it sets (a bad or unknown setting keeps its
    default) and every problem, each naming its key, in key order (PostgreSQL's jsonb does not
    keep the order the keys were written in)."""
    if not isinstance(raw, dict):
        return core.Policy(), ["policy must be a JSON object of scheduler options, e.g. {\"max_preemptions\": 10}"]
    kwargs: dict[str, Any] = {}
    problems = []
    for key, value in sorted(raw.items(), key=lambda item: str(item[0])):
        if key not in _DEFAULTS:
            close = difflib.get_close_matches(str(key), _DEFAULTS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(sorted(_DEFAULTS))}"
            problems.append(f"unknown scheduler option {key!r}{hint}")
            continue
        try:
            kwargs[key] = _policy_value(key, value, _DEFAULTS[key])
        except ValueError as err:
            problems.append(str(err))
    return core.Policy(**kwargs), problems


def policy_error(raw: Any) -> str | None:
    """The first problem with a pool's policy JSON (what saving the pool refuses it for), or None."""
    problems = policy_read(raw)[1]
    return problems[0] if problems else None


def policy_from_json(raw: Any) -> core.Policy:
    """A pool's policy from NodePool.policy; unknown keys and bad values fall back to defaults
    (saving a pool refuses them, `policy_error`; this reads what older versions let through)."""
    return policy_read(raw)[0]
