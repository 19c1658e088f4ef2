"""A run's energy per device of its gang, and per step and per sample, from the agents'
cumulative EnergySample readings. Callers pass runs already scoped to the user."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Max, Q, Sum

from apps.runs.models import Attempt, EnergySample, Run
from apps.tracking.display import J_PER_WH, significant_text
from apps.tracking.models import MetricSummary

# A job reports the training samples it has seen as a cumulative `samples` metric, or says it
# counts samples by logging `throughput` (samples/s: recipes.common), each step then being one
# global batch of the run's `batch_size` param.
SAMPLES_KEY = "samples"
THROUGHPUT_KEY = "throughput"
BATCH_PARAM = "batch_size"
# A language model also reports the tokens it has trained on, cumulatively (recipes.lm_loop).
TOKENS_KEY = "tokens"


@dataclass(frozen=True)
class DeviceEnergy:
    """One device of the gang over all of the run's attempts. device_index -1 is a whole node
    (an agent that measures per node, such as CPU slots read as one process tree)."""

    node: str
    device_index: int
    energy_j: float
    estimated: bool
    mean_utilization: float | None
    last_utilization: float | None
    mean_power_w: float | None
    last_power_w: float | None

    @property
    def device(self) -> str:
        return "whole node" if self.device_index < 0 else str(self.device_index)

    @property
    def wh(self) -> float:
        return self.energy_j / J_PER_WH

    @property
    def wh_text(self) -> str:
        return significant_text(self.wh)


@dataclass(frozen=True)
class RunEnergyFigures:
    """Energy of every attempt, summed over every node's devices. Per step it is divided by the
    steps done (the furthest step reached): a resumed run's repeated steps count once, their
    energy in full, so the figure is the energy per useful step."""

    energy_j: float
    estimated: bool
    steps_done: int
    samples: float | None
    samples_source: str
    devices: tuple[DeviceEnergy, ...]
    tokens: float | None = None

    @property
    def measured(self) -> bool:
        return self.energy_j > 0

    @property
    def wh(self) -> float:
        return self.energy_j / J_PER_WH

    @property
    def wh_per_step(self) -> float | None:
        return self.wh / self.steps_done if self.measured and self.steps_done > 0 else None

    @property
    def wh_per_1k_samples(self) -> float | None:
        return self.wh / self.samples * 1000 if self.measured and self.samples else None

    @property
    def wh_per_1k_tokens(self) -> float | None:
        return self.wh / self.tokens * 1000 if self.measured and self.tokens else None

    def as_dict(self) -> dict[str, Any]:
        """The figures as the compare API and the pages give them, with their display text."""
        return {
            "energy_j": self.energy_j, "energy_wh": self.wh, "estimated": self.estimated, "measured": self.measured,
            "steps_done": self.steps_done, "samples": self.samples, "samples_source": self.samples_source,
            "wh_per_step": self.wh_per_step, "wh_per_1k_samples": self.wh_per_1k_samples,
            "tokens": self.tokens, "wh_per_1k_tokens": self.wh_per_1k_tokens,
            "j_per_1k_tokens": self.wh_per_1k_tokens * J_PER_WH if self.wh_per_1k_tokens is not None else None,
            "wh_text": significant_text(self.wh) if self.measured else "–",
            "wh_per_step_text": significant_text(self.wh_per_step),
            "wh_per_1k_samples_text": significant_text(self.wh_per_1k_samples),
            "wh_per_1k_tokens_text": significant_text(self.wh_per_1k_tokens),
        }


@dataclass
class _Device:
    node: str
    index: int
    last_j: dict[int, float]  # per attempt: its last cumulative reading
    estimated: bool = False
    utilization: tuple[float, int] = (0.0, 0)  # sum, count
    power: tuple[float, int] = (0.0, 0)
    last_utilization_at: tuple[Any, int] | None = None  # (at, attempt) of the latest reading that had one
    last_power_at: tuple[Any, int] | None = None
    last_utilization: float | None = None
    last_power_w: float | None = None


def _runs_devices(run_ids: Sequence[int]) -> dict[int, tuple[DeviceEnergy, ...]]:
    """Each run's devices, summed up by the database: a row per attempt and device, whatever the
    number of samples (a long run's agents leave tens of thousands, which the run page read
    back one model instance each), then the latest utilization and power readings. Cumulative
    readings only grow, so an attempt's last reading on a device is its largest."""
    groups = (EnergySample.objects.filter(attempt__run_id__in=run_ids)
              .values("attempt__run_id", "attempt_id", "node_id", "node__hostname", "device_index").order_by()
              .annotate(last_j=Max("energy_j"), estimated=Count("id", filter=Q(estimated=True)),
                        u_sum=Sum("utilization"), u_count=Count("utilization"), p_sum=Sum("power_w"), p_count=Count("power_w"),
                        u_at=Max("at", filter=Q(utilization__isnull=False)), p_at=Max("at", filter=Q(power_w__isnull=False))))
    found: dict[int, dict[tuple[int, int], _Device]] = {}
    for g in groups:
        d = found.setdefault(g["attempt__run_id"], {}).setdefault(
            (g["node_id"], g["device_index"]), _Device(node=g["node__hostname"], index=g["device_index"], last_j={}))
        d.last_j[g["attempt_id"]] = g["last_j"]
        d.estimated |= g["estimated"] > 0
        d.utilization = (d.utilization[0] + (g["u_sum"] or 0.0), d.utilization[1] + g["u_count"])
        d.power = (d.power[0] + (g["p_sum"] or 0.0), d.power[1] + g["p_count"])
        # The latest reading wins; at the same moment, the later attempt's.
        if g["u_at"] is not None and (d.last_utilization_at is None or (g["u_at"], g["attempt_id"]) > d.last_utilization_at):
            d.last_utilization_at = (g["u_at"], g["attempt_id"])
        if g["p_at"] is not None and (d.last_power_at is None or (g["p_at"], g["attempt_id"]) > d.last_power_at):
            d.last_power_at = (g["p_at"], g["attempt_id"])
    wanted = Q(pk__in=[])
    for devices in found.values():
        for (node_id, index), d in devices.items():
            for latest in (d.last_utilization_at, d.last_power_at):
                if latest is not None:
                    wanted |= Q(attempt_id=latest[1], node_id=node_id, device_index=index, at=latest[0])
    if found:
        latest_rows = EnergySample.objects.filter(wanted).values_list("attempt_id", "node_id", "device_index", "at", "utilization",
                                                                      "power_w")
        for attempt_id, node_id, index, at, utilization, power_w in latest_rows:
            for d in (devices[(node_id, index)] for devices in found.values() if (node_id, index) in devices):
                if d.last_utilization_at == (at, attempt_id):
                    d.last_utilization = utilization
                if d.last_power_at == (at, attempt_id):
                    d.last_power_w = power_w
    return {run_id: _device_rows(devices.values()) for run_id, devices in found.items()}


def _device_rows(devices: Iterable[_Device]) -> tuple[DeviceEnergy, ...]:
    rows = [
        DeviceEnergy(node=d.node, device_index=d.index, energy_j=sum(d.last_j.values()), estimated=d.estimated,
                     mean_utilization=d.utilization[0] / d.utilization[1] if d.utilization[1] else None,
                     last_utilization=d.last_utilization,
                     mean_power_w=d.power[0] / d.power[1] if d.power[1] else None, last_power_w=d.last_power_w)
        for d in devices
    ]
    return tuple(sorted(rows, key=lambda r: (r.node, r.device_index)))


def _logged(runs: Sequence[Run]) -> dict[int, dict[str, float | None]]:
    """The last values of the metrics the figures read (samples, throughput, tokens), in one query."""
    logged: dict[int, dict[str, float | None]] = {}
    for run_id, key, value in MetricSummary.objects.filter(
        run_id__in=[r.pk for r in runs], key__in=[SAMPLES_KEY, THROUGHPUT_KEY, TOKENS_KEY]
    ).values_list("run_id", "key", "last_value"):
        logged.setdefault(run_id, {})[key] = value
    return logged


def _samples_seen(runs: Sequence[Run], logged: dict[int, dict[str, float | None]]) -> dict[int, tuple[float, str]]:
    """Training samples each run's job says it has seen, and from what; runs that do not say are left out."""
    out: dict[int, tuple[float, str]] = {}
    for run in runs:
        keys = logged.get(run.pk, {})
        count = keys.get(SAMPLES_KEY)
        batch = (run.params or {}).get(BATCH_PARAM)
        if count is not None and count > 0:
            out[run.pk] = (float(count), f"the job's {SAMPLES_KEY} metric")
        elif THROUGHPUT_KEY in keys and isinstance(batch, int) and not isinstance(batch, bool) and batch > 0 and run.steps_done:
            out[run.pk] = (float(batch * run.steps_done), f"{BATCH_PARAM} {batch} × {run.steps_done} steps")
    return out


def _tokens_seen(logged: dict[int, dict[str, float | None]]) -> dict[int, float]:
    """The last cumulative ``tokens`` metric of each run that logs one."""
    values = ((run_id, keys.get(TOKENS_KEY)) for run_id, keys in logged.items())
    return {run_id: float(value) for run_id, value in values if value is not None and value > 0}


def _recorded(runs: Sequence[Run]) -> dict[int, float]:
    """The energy each run's attempts recorded, from the attempts the caller read already where it did."""
    recorded: dict[int, float] = {}
    unread = []
    for run in runs:
        attempts = getattr(run, "_prefetched_objects_cache", {}).get("attempts")
        if attempts is None:
            unread.append(run.pk)
        else:
            recorded[run.pk] = sum(a.energy_j or 0.0 for a in attempts)
    for run_id, joules in Attempt.objects.filter(run_id__in=unread).values_list("run_id", "energy_j") if unread else ():
        recorded[run_id] = recorded.get(run_id, 0.0) + (joules or 0.0)
    return recorded


def runs_energy(*, runs: Sequence[Run], sampled: bool = True) -> dict[int, RunEnergyFigures]:
    """Each run's energy figures, in four queries whatever the number of runs and samples. A run with no
    samples (demo history, imports) keeps the total its attempts recorded, with no devices.
    sampled=False: the caller knows the runs have no samples, which are then not looked for."""
    per_run = _runs_devices([r.pk for r in runs]) if sampled else {}
    recorded = _recorded(runs)
    logged = _logged(runs)
    seen = _samples_seen(runs, logged)
    tokens = _tokens_seen(logged)
    out = {}
    for run in runs:
        devices = per_run.get(run.pk, ())
        total = sum(d.energy_j for d in devices) if devices else float(run.energy_j or recorded.get(run.pk, 0.0))
        samples_count, source = seen.get(run.pk, (None, ""))
        out[run.pk] = RunEnergyFigures(energy_j=total, estimated=bool(run.energy_estimated) or any(d.estimated for d in devices),
                                       steps_done=int(run.steps_done or 0), samples=samples_count, samples_source=source,
                                       devices=devices, tokens=tokens.get(run.pk))
    return out


def run_energy_figures(*, run: Run, sampled: bool = True) -> RunEnergyFigures:
    return runs_energy(runs=[run], sampled=sampled)[run.pk]
