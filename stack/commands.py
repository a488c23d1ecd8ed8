"""The command line of each process of the stack, in one place: `make run` starts them thus, and
the tests, benchmarks and reliability suites start the same processes from here (and find them
among a machine's processes by the same module names)."""

import sys
from pathlib import Path

DAPHNE_MODULE = "stack.daphne_uvloop"
INFERENCE_MODULE = "inference"
ASGI_APPLICATION = "chatapp.asgi:application"


def daphne(port: int, access_log: Path | None = None) -> list[str]:
    """One web process on loopback: daphne on uvloop, serving the app."""
    log = [] if access_log is None else ["--access-log", str(access_log)]
    return [sys.executable, "-m", DAPHNE_MODULE, "-b", "127.0.0.1", "-p", str(port), *log, ASGI_APPLICATION]


def inference(port: int | None = None) -> list[str]:
    """The inference service; without `port`, it listens where INFERENCE_HOST/PORT say."""
    where = [] if port is None else ["--host", "127.0.0.1", "--port", str(port)]
    return [sys.executable, "-m", INFERENCE_MODULE, *where]


def inference_check() -> list[str]:
    """Reads the inference service's settings and exits: 2 with one line when one cannot be used."""
    return [sys.executable, "-m", INFERENCE_MODULE, "--check"]


def celery_worker(schedule: Path) -> list[str]:
    """One worker that also runs the periodic schedule (beat), keeping it in `schedule`."""
    return [sys.executable, "-m", "celery", "-A", "chatapp", "worker", "--beat",
            "--schedule", str(schedule), "--loglevel", "INFO", "--concurrency", "1"]


def preparation() -> list[list[str]]:
    """What runs, in order, before the stack's processes start: `manage.py prepare` (the
    migrations, the static files and the first admin account, chatapp/management/commands/
    prepare.py). `make run` runs it, and docker-compose.yml's `migrate` job the same."""
    return [[sys.executable, "manage.py", "prepare"]]


def reaper() -> list[str]:
    """The periodic tasks in one process, for a stack without a broker."""
    return [sys.executable, "manage.py", "reap_streams"]


def whole_stack() -> list[str]:
    """`make run`: every process above under one supervisor."""
    return [sys.executable, "-m", "stack"]
