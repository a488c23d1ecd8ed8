"""ASGI entry point for daphne: HTTP goes to Django; channels carries cross-process signals."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatapp.settings")

from chatapp.runtime.asgi_handler import application as django_asgi_application  # noqa: E402

# Django must be set up before anything imports models.
django_application = django_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

# nginx serves /static/ itself in front of us; this answers it only when nginx is absent
# (`make run` on a machine without nginx), and passes every other path straight through.
application = ProtocolTypeRouter({"http": ASGIStaticFilesHandler(django_application)})
