"""Figures on the run page in words: energy in a unit that fits, counts with their nouns, and
parameter values as JSON writes them. Pure (no Django), so the page, the energy API that the
page's script reads and the tests all agree on one wording."""

from __future__ import annotations

import colorsys
import json
import math
from dataclasses import dataclass
from typing import Any

from apps.core.text import run_label as run_label  # re-exported: pages and selectors read it here

J_PER_WH = 3600.0
J_PER_KWH = 3_600_000.0


@dataclass(frozen=True, slots=True)
class EnergyUnit:
    name: str
    joules: float  # joules in one of this unit


JOULE = EnergyUnit("J", 1.0)
WATT_HOUR = EnergyUnit("Wh", J_PER_WH)
KILOWATT_HOUR = EnergyUnit("kWh", J_PER_KWH)


def energy_unit(joules: float) -> EnergyUnit:
    """The unit a total of `joules` reads best in: a CPU run of seconds is a few hundred joules,
    which is 0.0001 kWh; a day on a GPU node is kilowatt-hours, which is millions of joules."""
    if joules < J_PER_WH:
        return JOULE
    if joules < J_PER_KWH:
        return WATT_HOUR
    return KILOWATT_HOUR


def _figure(value: float) -> str:
    if value == 0:
        return "0"
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def energy_text(joules: float) -> str:
    """A total in its fitting unit; watt-hours also in kWh, the unit the finance pages use."""
    unit = energy_unit(joules)
    text = f"{_figure(joules / unit.joules)} {unit.name}"
    if unit is WATT_HOUR:
        text += f" ({joules / J_PER_KWH:.4g} kWh)"
    return text


def significant_text(value: float | None, digits: int = 3) -> str:
    """A small figure such as watt-hours per step to `digits` significant figures, in plain
    decimals: a CPU run's 0.0000891 Wh a step is not "0.0001", nor "8.91e-05"; a dash for none."""
    if value is None or not math.isfinite(value):
        return "–"
    if value == 0:
        return "0"
    places = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:,.{places}f}"


def value_text(value: Any) -> str:
    """A parameter's value as JSON writes it (true, null, [1, 2]), strings as they are: people
    type JSON into the submit form, not Python."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)  # sorted: PostgreSQL jsonb reorders keys


def steps_text(*, steps_done: int, total_steps: int | None) -> str:
    """Progress in steps; a dash when the run never said (demo history, jobs that log no steps),
    where "0" would read as a run that did nothing."""
    if total_steps:
        return f"{steps_done} of {total_steps}"
    return str(steps_done) if steps_done else "–"


def eta_text(*, status: str) -> str:
    """The ETA as the page first shows it: "done" only for a run that succeeded (a failed or
    cancelled run stopped, it is not done); an active run's is counted by the page's script."""
    return "done" if status == "succeeded" else "–"


def metric_text(value: Any) -> str:
    """A metric's value as common.js's fmt() writes it on the charts' pages: four decimals at
    most, exponents for the very large and very small (a loss of 2e-5 is not "0"), NaN and the
    infinities as the API spells them."""
    if value is None:
        return "–"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value_text(value)
    if not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    size = abs(value)
    if size >= 1e5 or (size < 1e-3 and value != 0):
        mantissa, exponent = f"{value:.3e}".split("e")
        return f"{mantissa}e{int(exponent):+d}"
    return f"{value:.4f}".rstrip("0").rstrip(".") if value else "0"


BYTE_UNITS = ("B", "KB", "MB", "GB", "TB")


def size_text(size: float) -> str:
    """A file's size as common.js's bytes() writes it: "512 B", "1.5 KB", "44.7 MB"."""
    unit = 0
    while size >= 1024 and unit < len(BYTE_UNITS) - 1:
        size /= 1024
        unit += 1
    return f"{size:.1f} {BYTE_UNITS[unit]}" if unit else f"{size:.0f} {BYTE_UNITS[unit]}"


def keep_best_text(keep_best: tuple[str, str]) -> str:
    """A ``keep_best`` rule in words: ("val_loss", "min") is "lowest val_loss"."""
    metric, mode = keep_best
    return f"{'highest' if mode == 'max' else 'lowest'} {metric}"


def retention_text(*, keep_last: int, keep_best: tuple[str, str] | None) -> str:
    """What a run's checkpoint retention keeps, said once on its Checkpoints card."""
    if not keep_last:
        return "Retention keeps every checkpoint."
    last = "the last checkpoint" if keep_last == 1 else f"the last {keep_last} checkpoints"
    if keep_best is None:
        return f"Retention keeps {last}."
    return f"Retention keeps {last} and, beside them, the best: the one with the {keep_best_text(keep_best)}."


def deleted_checkpoints_text(*, count: int, first_step: int, last_step: int) -> str:
    """The one line that stands for the checkpoints retention deleted, folded on the run page."""
    steps = f"step {first_step}" if first_step == last_step else f"steps {first_step}–{last_step}"
    return f"{count} deleted by retention ({steps})"


# The colours of runs (and of a run page's metrics) on the charts: static/tracking/common.js's
# COLORS is the same list, for the pages that colour in the browser.
RUN_COLORS = ("#2f5d8a", "#d1495b", "#66a182", "#edae49", "#8d5fd3", "#00798c", "#a0522d", "#3d405b", "#e07a5f", "#4f772d")


GOLDEN_ANGLE = 0.381966  # of a turn: successive hues land far from all earlier ones


def run_color(index: int) -> str:
    """The colour of the index-th run of a comparison, the same on each of its charts and tables.
    A comparison takes up to 50 runs: past the palette, hues step round the wheel rather than
    repeat, so no two runs share a colour."""
    if index < len(RUN_COLORS):
        return RUN_COLORS[index]
    hue = (index - len(RUN_COLORS)) * GOLDEN_ANGLE % 1.0
    red, green, blue = colorsys.hls_to_rgb(hue, 0.42, 0.6)
    return "#" + "".join(f"{round(c * 255):02x}" for c in (red, green, blue))
