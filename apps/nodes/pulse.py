"""The web tier's pulse: each web process records every TRAINYARD_WEB_PULSE_S that it is up.

The lost-node sweep counts a node's silence only while the web tier was up to hear it, so a web
outage never requeues healthy jobs (README: "When is a node lost?"). Started by portal.wsgi, so
it runs in web processes only, not in workers or management commands.
"""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.db import connection
from django.utils import timezone

from apps.nodes.services import web_pulse

log = logging.getLogger(__name__)
_started = threading.Event()


def _loop(interval: float) -> None:
    failing = False
    while True:
        try:
            web_pulse(now=timezone.now())
            if failing:
                log.info("web pulse recorded again")
            failing = False
        # This thread must outlive any error: a web process that stops pulsing makes the sweep
        # hold back on every silent node (the safe side, but no node would be declared lost).
        except Exception:
            if not failing:
                log.exception("cannot record the web pulse; retrying every %.0f s", interval)
            failing = True
            connection.close()  # a broken connection is reopened on the next try
        time.sleep(interval)


def pulse_start() -> None:
    """Start this process's pulse thread, once."""
    interval = float(settings.TRAINYARD_WEB_PULSE_S)
    if _started.is_set() or interval <= 0:
        return
    _started.set()
    threading.Thread(target=_loop, args=(interval,), name="trainyard-web-pulse", daemon=True).start()
