"""Ends answers whose relay died, every CHAT_REAP_INTERVAL_SECONDS, until SIGTERM or SIGINT.

`make run` without Redis has no Celery beat to run `fail_interrupted_streams` on its schedule;
this process runs the same task on the same interval instead.
"""

import logging
import signal
import threading

from django.conf import settings
from django.db import close_old_connections
from django.core.management.base import BaseCommand

from chatapp.tasks import fail_interrupted_streams

logger = logging.getLogger("chatapp.reaper")


class Command(BaseCommand):
    help = "End interrupted streams every CHAT_REAP_INTERVAL_SECONDS until SIGTERM or SIGINT."

    def handle(self, *args, **options):
        stop_requested = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop_requested.set())
        interval_s = settings.CHAT_REAP_INTERVAL_SECONDS
        logger.info("ending interrupted streams every %g s", interval_s)
        while not stop_requested.is_set():
            try:
                ended = fail_interrupted_streams()
                if ended:
                    logger.info("ended %d interrupted stream(s)", ended)
            except Exception:  # a database that is away now may be back next round
                logger.exception("ending interrupted streams failed; trying again next round")
            finally:
                close_old_connections()  # a fresh one next round, should the database restart meanwhile
            stop_requested.wait(interval_s)
        logger.info("stopped")
