"""Executed by `manage.py shell -c` for bench/load.py --idle-agents, kept running: each line on
stdin ("<count>") queues that many one-device runs in the bench's pool (BENCH_POOL) and runs a
scheduling pass, whose commit wakes the claims of the nodes it placed on; prints JSON per line."""

import json
import os
import sys

from django.utils import timezone

from apps.runs.models import Run
from apps.scheduling.services import scheduling_pass

pool, project, template = (int(os.environ[k]) for k in ("BENCH_POOL", "BENCH_PROJECT", "BENCH_TEMPLATE"))
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    count = int(line)
    Run.objects.bulk_create([Run(project_id=project, template_id=template, pool_id=pool, entrypoint="true", name="idle bench",
                                 queued_at=timezone.now()) for _ in range(count)])
    result = scheduling_pass(estimates=False)
    print(json.dumps({"placed": len(result.placed), "ms": round(result.timings_ms.get("total", 0.0), 1)}), flush=True)
