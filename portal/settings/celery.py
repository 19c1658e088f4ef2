"""Celery settings: chosen so that no task is lost when a worker or Redis dies.

Tasks are idempotent and take ids, so late acks (a task is acknowledged only after it ran) are
safe: a worker killed mid-task leaves the message to be redelivered after the visibility timeout.
"""

from __future__ import annotations

from portal.settings.env import env_int, env_str

REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")

CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A publish from a web request gives up within about a second when Redis is down
# (apps.core.queueing logs it; the beat redoes the work from the database).
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5}
CELERY_BROKER_CONNECTION_TIMEOUT = 2.0
_VISIBILITY_TIMEOUT_S = env_int("TRAINYARD_CELERY_VISIBILITY_TIMEOUT_S", 600)
CELERY_BROKER_TRANSPORT_OPTIONS = {
    # Longer than any task may run: an unacked task is redelivered after this many seconds.
    "visibility_timeout": _VISIBILITY_TIMEOUT_S,
    # Kombu looks for such tasks when a worker starts (finding only those already past the
    # timeout) and then every interval x throttle seconds: 100 s by default, whatever the
    # timeout. A worker that replaced a killed one within the timeout would otherwise leave
    # the dead worker's task waiting that long; look every tenth of the timeout instead.
    "unacked_restore_interval": max(1, _VISIBILITY_TIMEOUT_S // 10),
    "unacked_restore_throttle": 1,
}
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULE: dict[str, dict[str, object]] = {
    "scheduler-pass": {"task": "scheduling.pass", "schedule": 10.0, "options": {"queue": "default"}},
    "nodes-sweep-lost": {"task": "nodes.sweep_lost", "schedule": 5.0, "options": {"queue": "default"}},
    "billing-accrue": {"task": "billing.accrue", "schedule": 30.0, "options": {"queue": "default"}},
    "webhooks-sweep": {"task": "webhooks.sweep", "schedule": 30.0, "options": {"queue": "default"}},
    "runs-checkpoint-verify-sweep": {"task": "runs.checkpoint_verify_sweep", "schedule": 60.0, "options": {"queue": "default"}},
    "runs-storage-orphans-sweep": {"task": "runs.storage_orphans_sweep", "schedule": 3600.0, "options": {"queue": "default"}},
    # Slurm pools: submit queued runs, follow their jobs (apps.slurm); a cancel reaches Slurm within one period.
    "slurm-sync": {"task": "slurm.sync", "schedule": float(env_str("TRAINYARD_SLURM_SYNC_S", "5") or 5),
                   "options": {"queue": "default"}},
}
