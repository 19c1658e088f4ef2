"""Production settings. Refuses to start with the development secret key or DEBUG on."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from portal.settings.base import *  # noqa: F403
from portal.settings.base import DEFAULT_SECRET_KEY, SECRET_KEY
from portal.settings.env import env_bool, env_int

if SECRET_KEY == DEFAULT_SECRET_KEY or len(SECRET_KEY) < 50:
    raise ImproperlyConfigured("TRAINYARD_SECRET_KEY must be set to a random value of at least 50 characters")
if env_bool("TRAINYARD_DEBUG", False):
    raise ImproperlyConfigured("TRAINYARD_DEBUG must be off in production")
DEBUG = False
# Webhooks may not reach this network's own addresses unless the operator opts in knowingly
# (receivers on the internal network); see README's configuration table.
TRAINYARD_WEBHOOK_ALLOW_PRIVATE = env_bool("TRAINYARD_WEBHOOK_ALLOW_PRIVATE", False)

SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env_bool("TRAINYARD_SSL_REDIRECT", True)
SECURE_HSTS_SECONDS = env_int("TRAINYARD_HSTS_SECONDS", 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
REST_FRAMEWORK = {**REST_FRAMEWORK, "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"]}  # noqa: F405
