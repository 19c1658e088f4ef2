"""Settings of the Slurm backend, from the environment (portal.settings.env helpers)."""

from __future__ import annotations

from portal.settings.env import env_int, env_str


def sync_interval_s() -> float:
    """Seconds between syncs with Slurm (the beat's period; a cancel reaches Slurm within one)."""
    return float(env_str("TRAINYARD_SLURM_SYNC_S", "5") or 5)


def report_grace_s() -> int:
    """How long an ended Slurm job's own exit report may take before the sync reports for it."""
    return env_int("TRAINYARD_SLURM_REPORT_GRACE_S", 20)
