"""Figures on the run page in words: energy in a unit that fits, counts with their nouns, and
parameter values as JSON writes them. Pure (no Django), so the page, the energy API that the
page's script reads and the tests all agree on one wording."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

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


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


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
