"""`make bench-check`: reruns the quick benches (compare, scheduler core, agent overhead, ingest at
reduced size) and prints each figure beside the README's, flagging any more than 1.5x worse.

The README's figures are kept, machine-readable, in bench/reference.json (a test checks that the
README says each one). The reruns write bench/results/check-<name>.json, so a full `make bench`
result is never overwritten by a reduced one. Exit status 1 when a figure is flagged or a bench
failed; on a busy machine (see the load printed) a flag means "measure again", not "regressed".

    python bench/bench_check.py [--only compare,ingest] [--no-run] [--factor 1.5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _results import RESULT_PREFIX_ENV, RESULTS, measured  # noqa: E402

REFERENCE = HERE / "reference.json"
PREFIX = "check-"
# Each quick bench, reduced where its figure does not depend on the size (compare does: full size,
# fewer repeats; ingest's throughput does not: fewer batches, and no MLflow half).
QUICK: dict[str, list[str]] = {
    "compare": ["compare.py", "--repeats", "11"],
    "scheduler_core": ["scheduler_core.py", "--repeats", "7"],
    "agent_overhead": ["agent_overhead.py", "--steps", "2000", "--repeats", "2"],
    "ingest": ["ingest.py", "--batches", "8", "--repeats", "2", "--skip-mlflow"],
}


def load_reference(path: Path = REFERENCE) -> list[dict[str, Any]]:
    return list(json.loads(path.read_text())["figures"])


def lookup(doc: dict[str, Any], dotted: str) -> float | None:
    value: Any = doc
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def worse_by(ref: dict[str, Any], now: float) -> float:
    """How many times worse `now` is than the README's figure (below 1: better)."""
    value = float(ref["value"])
    if ref["better"] == "lower":
        return now / value if value else float("inf")
    return value / now if now else float("inf")


def run_bench(name: str) -> tuple[bool, float]:
    started = time.perf_counter()
    script, *argv = QUICK[name]
    print(f"\n=== {name}: {script} {' '.join(argv)} ===", flush=True)
    env = {**os.environ, RESULT_PREFIX_ENV: PREFIX}
    done = subprocess.run([sys.executable, str(HERE / script), *argv], cwd=HERE.parent, env=env)
    return done.returncode == 0, time.perf_counter() - started


def table(reference: list[dict[str, Any]], names: list[str], factor: float) -> tuple[list[dict[str, Any]], bool]:
    rows: list[dict[str, Any]] = []
    flagged = False
    for ref in reference:
        if ref["bench"] not in names:
            continue
        path = RESULTS / f"{PREFIX}{ref['bench']}.json"
        doc = json.loads(path.read_text()) if path.exists() else {}
        now = lookup(doc, ref["figure"])
        worse = worse_by(ref, now) if now is not None else None
        flag = worse is None or worse > factor
        flagged |= flag
        rows.append({**ref, "now": now, "worse_by": None if worse is None else round(worse, 2), "flagged": flag,
                     "measured": doc.get("measured", {})})
    return rows, flagged


def print_table(rows: list[dict[str, Any]], factor: float) -> None:
    print(f"\n{'bench':15} {'figure':34} {'README':>10} {'now':>10}  worse by  (flag: > {factor}x worse)")
    for r in rows:
        now = "missing" if r["now"] is None else f"{r['now']:,.0f}" if r["now"] >= 1000 else f"{r['now']:.4g}"
        worse = "" if r["worse_by"] is None else f"{r['worse_by']:.2f}x"
        mark = "  FLAG" if r["flagged"] else ""
        print(f"{r['bench']:15} {r['label'] + ' (' + r['unit'] + ')':34} {r['value']:>10,} {now:>10}  {worse:>8}{mark}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="comma-separated bench names (default: all quick benches)")
    parser.add_argument("--no-run", action="store_true", help="compare the last check-*.json results, run nothing")
    parser.add_argument("--factor", type=float, default=1.5)
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or list(QUICK)
    unknown = sorted(set(names) - set(QUICK))
    if unknown:
        parser.error(f"not a quick bench: {', '.join(unknown)} (choose from {', '.join(QUICK)})")
    before = measured()
    print(f"commit {before['commit']}, {len(before['uncommitted_files'])} tracked files uncommitted; "
          f"{before['cores']} cores, load {before['load_1_5_15']}", flush=True)
    failed, seconds = [], {}
    if not args.no_run:
        for name in names:
            ok, seconds[name] = run_bench(name)
            if not ok:
                failed.append(name)
    rows, flagged = table(load_reference(), names, args.factor)
    print_table(rows, args.factor)
    after = measured()
    print(f"load now {after['load_1_5_15']} on {after['cores']} cores; took {', '.join(f'{n} {s:.0f} s' for n, s in seconds.items())}")
    if failed:
        print(f"failed: {', '.join(failed)}")
    (RESULTS / "bench_check.json").write_text(json.dumps(
        {"factor": args.factor, "rows": rows, "failed": failed, "seconds": seconds, "measured": after,
         "load_at_start": before["load_1_5_15"]}, indent=2, default=str) + "\n")
    return 1 if flagged or failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
