"""ASGI entry point for daphne: HTTP goes to Django; channels carries cross-process signals."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatapp.settings")

from chatapp.runtime.asgi_handler import application as django_asgi_application  # noqa: E402

# Django must be set up before anything imports models.
django_application = django_asgi_application()

import asyncio  # noqa: E402
import logging  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402

from channels.routing import ProtocolTypeRouter  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from twisted.internet import defer  # noqa: E402

from chatapp import nginx_paths  # noqa: E402


class StaticFilesAsNginxRoutes(ASGIStaticFilesHandler):
    """Django's handler, for the paths nginx's /static/ location takes, and each as nginx reads
    it. Django's takes every path that starts with /static/, and its lookup refuses one that
    climbs out of the folder (/static/../api/x, which nginx sends to the API) with an exception
    the handler does not catch: a 500 and a traceback."""

    def _should_handle(self, path):
        return super()._should_handle(nginx_paths.routed(path))

    def file_path(self, url):
        return super().file_path(nginx_paths.routed(url))


# nginx serves /static/ itself in front of us; this answers it only when nginx is absent
# (`make run` on a machine without nginx), and passes every other path straight through.
application = ProtocolTypeRouter({"http": StaticFilesAsNginxRoutes(django_application)})

from chatapp import tasks  # noqa: E402
from chatapp.runtime import web_process  # noqa: E402


def _end_answers_of_the_process_before() -> None:
    try:
        tasks.fail_interrupted_streams()
    except Exception:  # the reaper's next round tries again
        logging.getLogger(__name__).exception("ending the answers of a web process gone before this one failed")


# The answers this process starts name it from now on (runtime/web_process.py). Without Redis it
# is its stack's only web process, likely started again after the one before it died (killed,
# crashed): the answers of every web process whose presence file is unlocked end now, in the
# background, so that a page resuming one is told so at once, not at the reaper's next round. A
# web process of another stack of the checkout holds its file locked, and its answers go on.
# With Redis a gone process is told by its key, after a while.
web_process.announce()
if not web_process.presence_shared():
    threading.Thread(target=_end_answers_of_the_process_before, name="answers-orphaned", daemon=True).start()


# Told to stop (SIGTERM), daphne cancels each request's handler and stops its loop, but Django's
# handler, cancelled, leaves its view's task running unawaited: a relay would vanish with the
# loop, its answer left `streaming` for the reaper, shorter than its page saw. Before that, each
# relay ends its answer as the server's stop (`shutdown`), its final write made. Under another
# server (none runs this app but daphne) no reactor is there to ask.
RELAYS_END_WITHIN_S = 5.0  # well inside the supervisor's and Docker's 10 s before SIGKILL


def _relays_ended_before_daphne_stops() -> None:
    reactor = sys.modules.get("twisted.internet.reactor")
    if reactor is None:
        return
    reactor.addSystemEventTrigger("before", "shutdown", lambda: defer.Deferred.fromFuture(
        asyncio.ensure_future(web_process.relays_ended_for_shutdown(RELAYS_END_WITHIN_S))))


_relays_ended_before_daphne_stops()
