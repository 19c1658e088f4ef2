import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings.base")
django_application = get_wsgi_application()

from apps.fleet.fastpath import AgentFastPath  # noqa: E402  (needs the apps loaded above)
from apps.nodes.pulse import pulse_start  # noqa: E402

application = AgentFastPath(django_application)  # the usual heartbeat and claim skip Django's request handling
pulse_start()  # the lost-node sweep counts a node's silence only while the web tier was up
