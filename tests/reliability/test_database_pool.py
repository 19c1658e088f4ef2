"""The web's PostgreSQL connection pool through a database outage (tests/reliability/
test_database_outage.py runs the outage itself): a request waiting for a connection gets its
503 before the agents' client gives up on it, and a connect that failed is not retried on a
doubling backoff that would keep the web refusing for as long again once the database is back."""

from __future__ import annotations

import inspect
import json
import os
import subprocess

from agents.client import Client
from tests.fixtures.live import PYTHON, ROOT

PRINT_POOL = "from django.conf import settings; import json; print(json.dumps(settings.DATABASES['default']['OPTIONS']['pool']))"


def _pool_options(**env: str) -> dict[str, int]:
    out = subprocess.run([PYTHON, "-c", f"import django; django.setup(); {PRINT_POOL}"], cwd=ROOT, check=True, capture_output=True,
                         text=True, env={**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings.base",
                                         "DATABASE_URL": "postgresql://u@127.0.0.1:1/trainyard", **env}, timeout=120)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def test_the_pool_answers_within_client_timeouts_and_reconnects_afresh() -> None:
    agent_timeout = inspect.signature(Client.__init__).parameters["timeout"].default
    pool = _pool_options()
    assert pool["timeout"] < agent_timeout, pool
    # psycopg_pool doubles the delay between attempts until reconnect_timeout (default 300 s).
    assert 0 < pool["reconnect_timeout"] <= 10, pool
    assert _pool_options(TRAINYARD_DB_POOL_TIMEOUT_S="7", TRAINYARD_DB_RECONNECT_S="3") | {"max_size": 0} == {
        "min_size": 2, "max_size": 0, "timeout": 7, "reconnect_timeout": 3}
