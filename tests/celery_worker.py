"""A real Celery worker in a subprocess, on the test database, taking tasks from the Redis broker."""

import os
import subprocess
import sys
from contextlib import contextmanager

from harness.child_process import REPO_DIR
from tests import servers

QUEUE = "chat-tests"  # send with .apply_async(queue=QUEUE): no other worker takes it
# Where the app's own .delay() sends (a title after a first answer): "celery", Celery's default.
DEFAULT_QUEUE = "celery"


@contextmanager
def celery_worker(queue: str = QUEUE, **variables: str):
    env = {**os.environ, "DATABASE_URL": servers.shared_database_url(), "DJANGO_SETTINGS_MODULE": "tests.settings",
           **variables}
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "chatapp", "worker", "--pool", "solo",
         "--loglevel", "WARNING", "--queues", queue],
        cwd=REPO_DIR, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        yield worker
    finally:
        worker.terminate()
        worker.wait(timeout=30)
