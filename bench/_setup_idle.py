"""Executed by `manage.py shell -c` for bench/load.py --idle-agents: BENCH_AGENTS idle nodes in one
pool (each with its own credential and one CPU device, nothing running), and a project and
template to place runs from. Prints JSON."""

import json
import os
import uuid

from django.utils import timezone

from apps.jobtemplates.models import JobTemplate
from apps.nodes.auth import hash_secret
from apps.nodes.models import Device, Node, NodePool
from apps.tenants.services import project_create, team_create

tag = uuid.uuid4().hex[:6]
team = team_create(slug=f"idle{tag}", name="Idle")
project = project_create(team=team, slug="idle", name="Idle")
template = JobTemplate.objects.create(slug=f"idle-{tag}", version=1, title="Idle", kind="custom", entrypoint="true")
pool = NodePool.objects.create(name=f"idle-{tag}")
now = timezone.now()
agents, devices = [], []
secrets = ["tyn_" + uuid.uuid4().hex for _ in range(int(os.environ.get("BENCH_AGENTS", "1000")))]
nodes = Node.objects.bulk_create([
    Node(pool=pool, hostname=f"idle-{i:04d}", agent_uid=uuid.uuid4().hex, credential_hash=hash_secret(secret), state="ready",
         last_heartbeat_at=now, session=1, address="127.0.0.1") for i, secret in enumerate(secrets)])
Device.objects.bulk_create([Device(node=node, index=0, kind="cpu") for node in nodes])
agents = [{"node": node.pk, "secret": secret, "session": 1} for node, secret in zip(nodes, secrets, strict=True)]
print(json.dumps({"agents": agents, "pool": pool.pk, "project": project.pk, "template": template.pk}))
