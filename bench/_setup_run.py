"""Executed by `manage.py shell -c` inside a benchmark's database: BENCH_RUNS (default 1)
running runs, each with an attempt assigned to its own node with its own credential, the way
separate agents report. Prints JSON {"runs": [{run, attempt, secret}, ...], "project": id}."""

import json
import os
import uuid

from apps.jobtemplates.models import JobTemplate
from apps.nodes.auth import hash_secret
from apps.nodes.models import Node, NodePool
from apps.runs.models import Assignment, Attempt, Run
from apps.tenants.services import project_create, team_create

team = team_create(slug=f"bench{uuid.uuid4().hex[:6]}", name="Bench")
project = project_create(team=team, slug="ingest", name="Ingest")
template = JobTemplate.objects.create(slug=f"bench-{uuid.uuid4().hex[:6]}", version=1, title="Bench", kind="train", entrypoint="true")
pool = NodePool.objects.create(name=f"bench-{uuid.uuid4().hex[:6]}")
runs = []
for i in range(int(os.environ.get("BENCH_RUNS", "1"))):
    secret = "tyn_" + uuid.uuid4().hex
    node = Node.objects.create(pool=pool, hostname=f"bench-{i}", agent_uid=uuid.uuid4().hex, credential_hash=hash_secret(secret))
    run = Run.objects.create(project=project, template=template, pool=pool, entrypoint="true", status="running")
    attempt = Attempt.objects.create(run=run, number=1, status="running")
    Assignment.objects.create(attempt=attempt, node=node, devices=[0], state="started")
    runs.append({"run": run.pk, "attempt": attempt.pk, "secret": secret})
print(json.dumps({"runs": runs, "project": project.pk}))
