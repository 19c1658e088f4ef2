"""Executed by `manage.py shell -c` for bench/load.py: BENCH_AGENTS nodes, each with its own
credential and one running run (attempt + started assignment) the way separate agents report,
and BENCH_USERS engineers of the team, each with a signed-in session. Prints JSON."""

import json
import os
import uuid

from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth.models import User
from django.contrib.sessions.backends.db import SessionStore
from django.utils import timezone

from apps.jobtemplates.models import JobTemplate
from apps.nodes.auth import hash_secret
from apps.nodes.models import Device, Node, NodePool
from apps.runs.models import Assignment, Attempt, Run
from apps.tenants.models import Role
from apps.tenants.services import membership_set, project_create, team_create

tag = uuid.uuid4().hex[:6]
team = team_create(slug=f"load{tag}", name="Load")
project = project_create(team=team, slug="load", name="Load")
template = JobTemplate.objects.create(slug=f"load-{tag}", version=1, title="Load", kind="train", entrypoint="true")
pool = NodePool.objects.create(name=f"load-{tag}")
now = timezone.now()
agents = []
for i in range(int(os.environ.get("BENCH_AGENTS", "200"))):
    secret = "tyn_" + uuid.uuid4().hex
    node = Node.objects.create(pool=pool, hostname=f"load-{i:03d}", agent_uid=uuid.uuid4().hex, credential_hash=hash_secret(secret),
                               state="ready", last_heartbeat_at=now, session=1)
    Device.objects.create(node=node, index=0, kind="cpu")
    run = Run.objects.create(project=project, template=template, pool=pool, entrypoint="true", status="running", started_at=now,
                             name=f"load run {i}")
    attempt = Attempt.objects.create(run=run, number=1, status="running", started_at=now)
    Assignment.objects.create(attempt=attempt, node=node, devices=[0], state="started", started_at=now)
    agents.append({"node": node.pk, "run": run.pk, "attempt": attempt.pk, "secret": secret, "session": node.session})
users = []
for i in range(int(os.environ.get("BENCH_USERS", "50"))):
    user = User.objects.create_user(f"load-{tag}-{i}")  # no password: signed in by session only (no slow hashing)
    membership_set(team=team, user=user, role=Role.ENGINEER)
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    users.append({"user": user.username, "session": session.session_key})
print(json.dumps({"agents": agents, "users": users, "project": project.pk}))
