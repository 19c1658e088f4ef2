"""`make bench`: runs every benchmark in bench/ in turn; each prints its figures and writes
bench/results/<name>.json, with the commit, date and machine (a bench that does not stamp its own
result is stamped here). bench/results/run_all.json says which commit the whole run measured, so
the README can state it. Benchmarks are never timed assertions inside the test suite."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from agents.devices import Nvml  # noqa: E402
from bench._results import RESULTS, measured, stamp_file  # noqa: E402

# Benches that measure GPUs: without one they are skipped, not turned into CPU figures.
GPU_ONLY = {"gpu_check.py": "python bench/gpu_check.py --cpu runs its CPU dry run",
            "lm_gpu.py": "python bench/lm_gpu.py --cpu runs its CPU dry run",
            "lm_ceiling.py": "it measures CUDA kernels alone and has no CPU dry run"}
# Benches with a second scenario the README reports: run again with these arguments.
SCENARIOS = {"load.py": [["--idle-agents", "1000", "--duration", "120"]],
             "gpu_check.py": [["--template", "lm-pretrain", "--json", "bench/results/gpu_check-lm.json"]]}


def main() -> int:
    failures = []
    start = measured()
    benches: dict[str, dict[str, object]] = {}
    for script in sorted(HERE.glob("*.py")):
        if script.name in {"run_all.py", "bench_check.py", "__init__.py"} or script.name.startswith("_"):
            continue
        if script.name in GPU_ONLY and not Nvml().available:
            print(f"\n=== {script.name} === skipped: no GPU (NVML shows none); {GPU_ONLY[script.name]}", flush=True)
            benches[script.stem] = {"skipped": "no GPU"}
            continue
        for extra in [[], *SCENARIOS.get(script.name, [])]:
            label = " ".join([script.name, *extra])
            print(f"\n=== {label} ===", flush=True)
            began, wall = time.time(), time.perf_counter()
            ok = subprocess.run([sys.executable, str(script), *extra], cwd=HERE.parent).returncode == 0
            if not ok:
                failures.append(label)
            written = sorted(p.name for p in RESULTS.glob("*.json") if p.stat().st_mtime >= began)
            for name in written:
                stamp_file(RESULTS / name)
            key = script.stem if not extra else f"{script.stem} {' '.join(extra)}"
            benches[key] = {"ok": ok, "seconds": round(time.perf_counter() - wall), "wrote": written}
    end = measured()
    if end["commit"] != start["commit"]:
        print(f"\nWARNING: HEAD moved during the run ({start['commit']} -> {end['commit']}): not one commit's figures")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "run_all.json").write_text(json.dumps({"started": start, "benches": benches, "measured": end}, indent=2) + "\n")
    if failures:
        print(f"\nfailed: {', '.join(failures)}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
