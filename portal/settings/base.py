"""Settings shared by every environment. Environment-specific modules import * from here."""

from __future__ import annotations

import hashlib
from pathlib import Path

import dj_database_url
import plotly

from portal.settings.env import env_bool, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent.parent
VAR_DIR = Path(env_str("TRAINYARD_VAR_DIR", str(BASE_DIR / "var")))

# The development default; production.py refuses to start with it.
DEFAULT_SECRET_KEY = "trainyard-insecure-development-key-do-not-use-in-production"
SECRET_KEY = env_str("TRAINYARD_SECRET_KEY", DEFAULT_SECRET_KEY)
DEBUG = env_bool("TRAINYARD_DEBUG", True)
TRAINYARD_HOST = env_str("TRAINYARD_HOST", "127.0.0.1")
TRAINYARD_PORT = env_int("TRAINYARD_PORT", 8000)
ALLOWED_HOSTS = env_list("TRAINYARD_ALLOWED_HOSTS", [TRAINYARD_HOST, "localhost", "127.0.0.1", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("TRAINYARD_CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "apps.core",
    "apps.audit",
    "apps.tenants",
    "apps.accounts",
    "apps.nodes",
    "apps.jobtemplates",
    "apps.runs",
    "apps.tracking",
    "apps.fleet",
    "apps.scheduling",
    "apps.billing",
    "apps.webhooks",
    "apps.vault",
    "apps.artifacts",
    "apps.registry",
    "apps.notifications",
    "apps.mlflow_api",
    "apps.setup",
    "apps.slurm",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Outside everything that builds the body: the ETag must hash what is finally sent.
    "apps.core.conditional.ApiConditionalGetMiddleware",
    "apps.core.middleware.DatabaseUnavailableMiddleware",
    "apps.core.middleware.NulByteMiddleware",
    # Before anything parses a body (CSRF reads forms): deep or oversized JSON is a 400 naming the limit.
    "apps.core.middleware.JsonLimitsMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "apps.audit.middleware.AuditContextMiddleware",
    "apps.core.middleware.PortalNotFoundMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "apps.tenants.context_processors.navigation",
            ],
        },
    },
]

SQLITE_PATH = VAR_DIR / "trainyard.sqlite3"
_database_url = env_str("DATABASE_URL", "")
if _database_url:
    DATABASES = {"default": dj_database_url.parse(_database_url, conn_max_age=60, conn_health_checks=True)}
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        # Django turns psycopg's prepared statements off (for poolers such as PgBouncer, not used
        # here). On: the statements run through plain psycopg cursors, the metric ingestion's,
        # are prepared once per connection after a few uses, which halved the database's CPU per
        # metric batch (bench/_profile_requests.py). Django's own queries bind client-side and
        # are not affected.
        DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = env_int("TRAINYARD_DB_PREPARE_THRESHOLD", 5)
        # The web holds a thread per connected agent (its open claim: portal.launch.web_argv), so a
        # connection per thread would be one per agent, past PostgreSQL's max_connections at a
        # thousand. A pool per process instead: a request borrows a connection (a waiting claim
        # hands it back), and past the pool's size threads wait their turn for one.
        _pool_size = env_int("TRAINYARD_DB_POOL_SIZE", 10)
        if _pool_size:
            DATABASES["default"]["CONN_MAX_AGE"] = 0  # the pool keeps them instead
            # While the database is down a request waits `timeout` for a connection, then answers
            # 503: well under the agent client's 30 s timeout, so it gets the 503, not a timeout. A
            # failed connect retries on a doubling backoff that would leave the web refusing for as
            # long again after the database is back; giving up after `reconnect_timeout` lets the
            # next request start afresh, so the web recovers within seconds of the database.
            DATABASES["default"]["OPTIONS"]["pool"] = {
                "min_size": 2, "max_size": _pool_size, "timeout": env_int("TRAINYARD_DB_POOL_TIMEOUT_S", 10),
                "reconnect_timeout": env_int("TRAINYARD_DB_RECONNECT_S", 5)}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(SQLITE_PATH),
            "OPTIONS": {
                # Several processes (web, worker, beat) share the file: WAL lets readers go on
                # while one writes, IMMEDIATE takes the write lock up front so two writers queue
                # instead of failing with "database is locked" half-way through a transaction.
                "timeout": 30,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 10}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
# English only. Off, Django skips the translation machinery that every number and date shown on
# a page went through (a thread-local lookup each: about a tenth of the runs list's CPU).
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = VAR_DIR / "staticfiles"
# Plotly.js comes from the installed plotly package: no CDN (the fleet may have no internet)
# and no vendored copy to drift from the pinned version.
STATICFILES_DIRS = [
    BASE_DIR / "static",
    ("vendor/plotly", str(Path(plotly.__file__).parent / "package_data")),
]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True
MEDIA_ROOT = VAR_DIR / "artifacts"

LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"

REST_FRAMEWORK = {
    "DEFAULT_PARSER_CLASSES": [
        "apps.core.api.parsers.JSONParser",  # refuses NUL characters, which PostgreSQL cannot store
        # Refuse fields nested past JSON_MAX_DEPTH: DRF's JSONField json.loads a form's value.
        "apps.core.api.parsers.FormParser",
        "apps.core.api.parsers.MultiPartParser",
    ],
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "apps.accounts.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer", "rest_framework.renderers.BrowsableAPIRenderer"],
    "DEFAULT_SCHEMA_CLASS": "apps.core.api.schema.ApiAutoSchema",
    "DEFAULT_PAGINATION_CLASS": "apps.core.pagination.Pagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "apps.core.errors.api_exception_handler",
    # A forecast replays the queue (up to a second or two on a long one): a form asks now and then.
    "DEFAULT_THROTTLE_RATES": {"login": "10/min", "token": "10/min", "forecast": "60/min"},
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Trainyard API",
    "DESCRIPTION": (
        "Submit, watch and compare training runs on a shared GPU fleet.\n\n"
        "Lists are paginated (`page`, `page_size` up to 500; `next`/`previous` links) and take `ordering` (an unknown "
        "field is a 400 listing the allowed ones). For cheap polling every JSON GET answers an `ETag`: send it back as "
        "`If-None-Match` to get a 304 with no body while nothing changed; lists with an `updated_at` also take "
        "`updated_after=<ISO date-time>`. Every error has the body `{\"error\": {\"status\", \"code\", \"message\", "
        "\"fields\"}}`."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    # Served from the sidecar package: the docs page must work without internet.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Several models have a `status` field with different choices; name each set explicitly.
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "apps.runs.models.RunStatus",
        "AttemptStatusEnum": "apps.runs.models.AttemptStatus",
        "XAxisEnum": "apps.tracking.compare_services.X_AXES",  # a series' x_axis and a saved comparison's x
    },
}

# Login lockouts and API throttles are counted in Redis, in one place for every web process and
# host (a per-process cache let each gunicorn worker count alone). It answers as an empty cache
# while Redis is down (apps.core.cache), so an outage costs the counting, not the logins. Keys
# are per database: portals sharing one Redis (staging beside production, the live tests'
# stacks) do not count each other's failures.
_DB = DATABASES["default"]
_DB_ID = hashlib.sha256(f"{_DB.get('HOST')}:{_DB.get('PORT')}/{_DB.get('NAME')}".encode()).hexdigest()[:12]
CACHES = {
    "default": {
        "BACKEND": "apps.core.cache.SharedCache",
        "LOCATION": env_str("TRAINYARD_CACHE_URL", env_str("REDIS_URL", "redis://127.0.0.1:6379/0")),
        "KEY_PREFIX": env_str("TRAINYARD_CACHE_PREFIX", f"trainyard:{_DB_ID}"),
        "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
    }
}
# Other keys this portal keeps in Redis (claim wake-ups, apps.nodes.wakeups): per database too.
TRAINYARD_REDIS_PREFIX = env_str("TRAINYARD_REDIS_PREFIX", f"trainyard:{_DB_ID}")

EMAIL_BACKEND = env_str("TRAINYARD_EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = env_str("TRAINYARD_FROM_EMAIL", "trainyard@localhost")

# Agents: how long a node may stay silent before it is declared lost.
TRAINYARD_NODE_TIMEOUT_S = env_int("TRAINYARD_NODE_TIMEOUT_S", 30)
# A gap this long (or half the node timeout, if longer) between lost-node sweeps means the
# sweeper was down: silent nodes then get one node timeout of grace (apps.nodes.services).
TRAINYARD_SWEEP_GAP_S = env_int("TRAINYARD_SWEEP_GAP_S", 20)
# Every web process records a pulse this often: a node's silence counts against it only while
# the web tier was up to hear it (apps.nodes.pulse; README "When is a node lost?").
TRAINYARD_WEB_PULSE_S = env_int("TRAINYARD_WEB_PULSE_S", 2)
TRAINYARD_GANG_START_TIMEOUT_S = env_int("TRAINYARD_GANG_START_TIMEOUT_S", 120)
# A run requeued after an infrastructure failure waits this long before its first retry, twice
# as long before each further one, at most TRAINYARD_RETRY_BACKOFF_MAX_S (apps.runs.services.failures).
TRAINYARD_RETRY_BACKOFF_S = env_int("TRAINYARD_RETRY_BACKOFF_S", 30)
TRAINYARD_RETRY_BACKOFF_MAX_S = env_int("TRAINYARD_RETRY_BACKOFF_MAX_S", 600)

# Project secrets (apps.vault): Fernet keys, newest first. Empty is allowed only with DEBUG on
# (a key derived from SECRET_KEY); `check --deploy` refuses it otherwise.
TRAINYARD_SECRET_KEYS = env_list("TRAINYARD_SECRET_KEYS", [])

# Outgoing webhooks may not target loopback, link-local (cloud metadata), private or reserved
# addresses: checked when a URL is saved and again, on the resolved address, at each delivery
# (DNS rebinding). Only for development and tests with a receiver on this machine.
TRAINYARD_WEBHOOK_ALLOW_PRIVATE = env_bool("TRAINYARD_WEBHOOK_ALLOW_PRIVATE", False)

# Code snapshots for the custom template: upload size, and what they may unpack to.
TRAINYARD_MAX_SNAPSHOT_BYTES = env_int("TRAINYARD_MAX_SNAPSHOT_BYTES", 20 * 1024 * 1024)
TRAINYARD_MAX_SNAPSHOT_UNPACKED_BYTES = env_int("TRAINYARD_MAX_SNAPSHOT_UNPACKED_BYTES", 200 * 1024 * 1024)

# Object storage for checkpoints and code snapshots (apps.core.storage): an S3-compatible bucket
# once TRAINYARD_STORAGE_BUCKET is set (then web hosts keep nothing on disk), else MEDIA_ROOT,
# which the web serves itself through signed URLs (one host, or a folder all web hosts share).
# The endpoint is the address agents reach the store at: presigned URLs are signed for it.
TRAINYARD_STORAGE_BUCKET = env_str("TRAINYARD_STORAGE_BUCKET", "")
TRAINYARD_STORAGE_BACKEND = env_str("TRAINYARD_STORAGE_BACKEND", "s3" if TRAINYARD_STORAGE_BUCKET else "local")
TRAINYARD_STORAGE_ENDPOINT = env_str("TRAINYARD_STORAGE_ENDPOINT", "")  # empty: AWS's own for the region
TRAINYARD_STORAGE_REGION = env_str("TRAINYARD_STORAGE_REGION", "us-east-1")
TRAINYARD_STORAGE_ACCESS_KEY = env_str("TRAINYARD_STORAGE_ACCESS_KEY", "")  # empty: boto3's own chain (role, profile)
TRAINYARD_STORAGE_SECRET_KEY = env_str("TRAINYARD_STORAGE_SECRET_KEY", "")
TRAINYARD_STORAGE_PREFIX = env_str("TRAINYARD_STORAGE_PREFIX", "")  # e.g. "trainyard/": keys live under it
# How long a presigned URL stays valid, and the part size of multipart uploads (files larger
# than one part go in parts; S3 takes at least 5 MiB a part and at most 10,000 parts).
TRAINYARD_STORAGE_URL_TTL_S = env_int("TRAINYARD_STORAGE_URL_TTL_S", 3600)
TRAINYARD_STORAGE_PART_BYTES = env_int("TRAINYARD_STORAGE_PART_BYTES", 64 * 1024 * 1024)
# Objects under the checkpoint and artifact prefixes that no row references (an upload whose
# confirmation never came) are deleted hourly once older than this (apps.runs.services.storage_orphans).
TRAINYARD_ORPHAN_GRACE_S = env_int("TRAINYARD_ORPHAN_GRACE_S", 24 * 3600)
# Run artifacts (apps.artifacts): the largest single file a run may keep.
TRAINYARD_ARTIFACT_MAX_BYTES = env_int("TRAINYARD_ARTIFACT_MAX_BYTES", 2 * 1024 * 1024 * 1024)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "filters": {"refusals": {"()": "portal.logfilters.RefusalsWithoutTraceback"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("TRAINYARD_LOG_LEVEL", "INFO")},
    # On the logger, so every handler of the record (Django's own console one too) gets it trimmed.
    "loggers": {"django.server": {"level": "WARNING"}, "django.request": {"filters": ["refusals"]}},
}

from portal.settings.celery import *  # noqa: E402, F403
