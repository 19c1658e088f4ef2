"""Reads for environment lineage: each attempt's record per node, and what differs between runs.
Callers pass runs already scoped to the user, as for apps.tracking.selectors."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from apps.runs.models import Run
from apps.tracking.models import AttemptEnvironment

# The fields a comparison lines up, in the order shown, with the words the pages use.
LABELS = {"host": "Host", "devices": "Devices", "gpu_driver": "GPU driver", "cuda_driver": "CUDA driver", "torch": "torch",
          "torch_cuda": "CUDA (torch)", "cudnn": "cuDNN", "python": "Python", "platform": "Platform", "seed": "Seed",
          "image": "Container image", "packages": "Packages"}
FIELDS = tuple(LABELS)
COMPARE_MAX_PACKAGE_ROWS = 500


def _text(value: Any) -> str:
    if value is None or value == "":
        return "–"
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _device_text(d: dict[str, Any]) -> str:
    text = f"{d.get('kind', '')} {d.get('index', '')}: {d.get('model', '')}"
    return f"{text} ({d['uuid']})" if d.get("uuid") else text


def _image_text(container: Any) -> str:
    """The container image an attempt ran in (container mode), pinned by digest."""
    if not isinstance(container, dict) or not container.get("digest"):
        return "–"
    return f"{container.get('image', '')}@{container['digest']}"


def environment_fields(record: AttemptEnvironment) -> dict[str, str]:
    """A record's comparable fields as the pages show them."""
    env = record.environment if isinstance(record.environment, dict) else {}
    devices = [d for d in env.get("devices") or [] if isinstance(d, dict)]
    python = env.get("python") if isinstance(env.get("python"), dict) else {}
    torch = env.get("torch") if isinstance(env.get("torch"), dict) else None
    if torch is not None:
        torch_text = str(torch.get("version") or "–")
    elif env.get("torch_error"):
        torch_text = f"not importable ({env['torch_error']})"
    else:
        torch_text = "–"
    packages = record.package_set.packages
    return {
        "host": record.hostname,
        "devices": "; ".join(_device_text(d) for d in devices) or "–",
        "gpu_driver": _text(env.get("gpu_driver")),
        "cuda_driver": _text(env.get("cuda_driver")),
        "torch": torch_text,
        "torch_cuda": _text(torch.get("cuda")) if torch else "–",
        "cudnn": _text(torch.get("cudnn")) if torch else "–",
        "python": f"{python.get('version', '')} ({python.get('implementation', '')})" if python else "–",
        "platform": _text(env.get("platform")),
        "seed": _text(env.get("seed")),
        "image": _image_text(env.get("container")),
        "packages": f"{len(packages)} ({record.package_set.sha256[:12]})",
    }


def _package_versions(packages: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in packages:
        name, _, version = item.partition("==")
        out[name.lower().replace("_", "-")] = version
    return out


def run_environments(*, run: Run) -> list[dict[str, Any]]:
    """The run's environment records, by attempt then node rank, each with its fields, packages
    and any part the agent could not read."""
    records = (AttemptEnvironment.objects.filter(attempt__run=run).select_related("attempt", "package_set")
               .order_by("attempt__number", "node_rank"))
    out = []
    for r in records:
        env = r.environment if isinstance(r.environment, dict) else {}
        torch = env.get("torch") if isinstance(env.get("torch"), dict) else None
        out.append({
            "attempt": r.attempt.number, "node_rank": r.node_rank, "hostname": r.hostname, "recorded_at": r.created_at.isoformat(),
            "fields": environment_fields(r),
            "devices": [d for d in env.get("devices") or [] if isinstance(d, dict)],
            "cuda_available": bool(torch and torch.get("cuda_available")),
            "problems": {k: str(env[k]) for k in ("probe_error", "packages_error", "torch_error", "packages_note") if env.get(k)},
            "packages_sha256": r.package_set.sha256, "packages_count": len(r.package_set.packages),
            "packages": list(r.package_set.packages), "environment": env,
        })
    return out


def _latest_rank0(run_ids: Sequence[int]) -> dict[int, AttemptEnvironment]:
    """Per run, the rank 0 record of its latest attempt that has one."""
    latest: dict[int, AttemptEnvironment] = {}
    records = (AttemptEnvironment.objects.filter(attempt__run_id__in=run_ids, node_rank=0).select_related("attempt", "package_set")
               .order_by("attempt__run_id", "-attempt__number"))
    for r in records:
        latest.setdefault(r.attempt.run_id, r)
    return latest


def environment_compare(*, run_ids: Sequence[int]) -> dict[str, Any]:
    """The environments of these runs side by side (each run's latest attempt, rank 0 node): every
    field with whether it differs, and the packages whose versions differ (– where absent)."""
    found = _latest_rank0(run_ids)
    records = [found.get(rid) for rid in run_ids]
    per_run = [environment_fields(r) if r else {} for r in records]
    fields = [{"name": name, "label": LABELS[name], "values": [f.get(name) for f in per_run],
               "differs": len({f.get(name) for f in per_run}) > 1} for name in FIELDS]
    versions = [_package_versions(r.package_set.packages) if r else None for r in records]
    present = [v for v in versions if v is not None]
    names = sorted({n for v in present for n in v})
    packages = []
    for name in names:
        values = [None if v is None else v.get(name) for v in versions]
        if len({val for val, v in zip(values, versions, strict=True) if v is not None}) > 1:
            packages.append({"name": name, "values": values, "differs": True})
    return {"attempts": [{"run": rid, "attempt": r.attempt.number if r else None} for rid, r in zip(run_ids, records, strict=True)],
            "recorded": sum(1 for r in records if r), "fields": fields,
            "packages": packages[:COMPARE_MAX_PACKAGE_ROWS], "packages_differing": len(packages)}
