"""Settings for the test suite: real databases (SQLite by default, PostgreSQL when
DATABASE_URL is set), fast password hashing, mail kept in memory."""

from __future__ import annotations

from portal.settings.base import *  # noqa: F403
from portal.settings.env import env_bool

DEBUG = False
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
# In-process tests run tasks inline; tests with real workers start them as subprocesses with
# the base settings instead.
CELERY_TASK_ALWAYS_EAGER = env_bool("TRAINYARD_CELERY_EAGER", True)
CELERY_TASK_EAGER_PROPAGATES = True
# Test receivers listen on 127.0.0.1; the guard's refusals have their own tests (override_settings).
TRAINYARD_WEBHOOK_ALLOW_PRIVATE = True
# In-process tests count lockouts per process; the shared Redis cache has its own tests
# (tests/foundation/test_shared_lockout.py).
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
REST_FRAMEWORK = {**REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"login": "1000/min", "token": "1000/min", "forecast": "1000/min"}}  # noqa: F405
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
# In-process tests re-place a requeued run at once; tests of the backoff itself set their own.
TRAINYARD_RETRY_BACKOFF_S = 0
# In-process tests keep a connection per thread, as before the pool (portal.settings.base), which
# is for the web's thread per agent; the live stacks' processes run with it.
if DATABASES["default"].get("OPTIONS", {}).pop("pool", None):  # noqa: F405
    DATABASES["default"]["CONN_MAX_AGE"] = 60  # noqa: F405
