from __future__ import annotations

from django.db import models  # noqa: F401
