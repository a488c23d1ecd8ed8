"""Runs the periodic schedule in-process until SIGTERM or SIGINT (the `reaper` of `make run`).

`make run` without Redis has no Celery beat; this process runs every task of
settings.CELERY_BEAT_SCHEDULE on its interval instead: ending answers whose relay died every
CHAT_REAP_INTERVAL_SECONDS, purging what CHAT_RETENTION_DAYS let expire every hour, and so on.
"""

import logging
import signal
import threading
import time

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import close_old_connections
from django.utils.module_loading import import_string

logger = logging.getLogger("chatapp.reaper")


class Command(BaseCommand):
    help = "Run the periodic tasks of CELERY_BEAT_SCHEDULE in-process until SIGTERM or SIGINT."

    def handle(self, *args, **options):
        stop_requested = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop_requested.set())
        schedule = {name: (import_string(entry["task"]), float(entry["schedule"]))
                    for name, entry in settings.CELERY_BEAT_SCHEDULE.items()}
        logger.info("running %s", ", ".join(f"{name} every {interval_s:g} s"
                                             for name, (_, interval_s) in schedule.items()))
        due = dict.fromkeys(schedule, time.monotonic())  # every task runs once at start
        while not stop_requested.is_set():
            for name, (task, interval_s) in schedule.items():
                if due[name] > time.monotonic():
                    continue
                try:
                    task()  # in this process, as the eager Celery of the web processes would
                except Exception:  # a database that is away now may be back next round
                    logger.exception("%s failed; trying again next round", name)
                finally:
                    close_old_connections()  # a fresh one next round, should the database restart meanwhile
                due[name] = time.monotonic() + interval_s
            stop_requested.wait(max(0.0, min(due.values()) - time.monotonic()))
        logger.info("stopped")
