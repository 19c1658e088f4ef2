"""`make bench`: runs every benchmark in bench/ in turn; each prints its figures and writes
bench/results/<name>.json. Benchmarks are never timed assertions inside the test suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from agents.devices import Nvml  # noqa: E402

# Benches that measure GPUs: without one they are skipped, not turned into CPU figures.
GPU_ONLY = {"gpu_check.py": "python bench/gpu_check.py --cpu runs its CPU dry run"}


def main() -> int:
    failures = []
    for script in sorted(HERE.glob("*.py")):
        if script.name in {"run_all.py", "__init__.py"} or script.name.startswith("_"):
            continue
        if script.name in GPU_ONLY and not Nvml().available:
            print(f"\n=== {script.name} === skipped: no GPU (NVML shows none); {GPU_ONLY[script.name]}", flush=True)
            continue
        print(f"\n=== {script.name} ===", flush=True)
        if subprocess.run([sys.executable, str(script)], cwd=HERE.parent).returncode != 0:
            failures.append(script.name)
    if failures:
        print(f"\nfailed: {', '.join(failures)}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
