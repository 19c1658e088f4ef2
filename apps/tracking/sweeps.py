"""A sweep's objective and its best trial: plain Python, no database."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

# Metric names that are better low; anything else (accuracy, reward, throughput) is better high.
LOWER_IS_BETTER = ("loss", "error", "perplexity", "ppl", "mse", "mae", "rmse", "wer", "cer", "latency", "time")


def metric_lower_is_better(key: str) -> bool:
    words = key.lower().replace("-", "_").replace("/", "_").split("_")
    return any(w in LOWER_IS_BETTER for w in words)


def sweep_objective(*, params: Any, metric: str | None) -> dict[str, Any] | None:
    """What the sweep optimises: its `objective` ({"metric", "goal": "min"|"max"}) where it gave
    one, else the trials' shown metric with the goal its name implies (a loss down, the rest up)."""
    given = params.get("objective") if isinstance(params, dict) else None
    key = metric
    goal = ""
    if isinstance(given, dict):
        key = given.get("metric") or metric
        goal = given.get("goal") or ""
    if not key:
        return None
    if goal not in ("min", "max"):
        goal = "min" if metric_lower_is_better(key) else "max"
    return {"metric": key, "goal": goal, "given": isinstance(given, dict)}


def sweep_best_trial(*, rows: Sequence[dict[str, Any]], goal: str) -> int | None:
    """The id of the trial with the best finite objective value (lowest for min, highest for
    max; the earlier trial on a tie), or None when no trial has one."""
    scored = [(r["metric"], i, r["id"]) for i, r in enumerate(rows)
              if isinstance(r.get("metric"), (int, float)) and math.isfinite(r["metric"])]
    if not scored:
        return None
    if goal == "max":
        return max(scored, key=lambda s: (s[0], -s[1]))[2]
    return min(scored, key=lambda s: (s[0], s[1]))[2]
