"""The processes the relay benchmark measures: the stand-in upstream, daphne processes running
the app on a database of the run's own, and nginx in front of them when asked.

daphne gets the in-memory channel layer (no Redis: nothing here stops a stream), a signed-in
user with room for every stream (`CHAT_MAX_STREAMS_PER_USER`), `CHAT_MAX_TOKENS` set to the
answer length, which the stand-in answers token for token, and no titles asked of the model.
"""

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from harness.child_process import REPO_DIR, ChildProcess
from harness.ports import free_port
from stack import commands, nginx

from .relay_upstream import raise_open_files_limit

logger = logging.getLogger(__name__)
USERNAME, PASSWORD = "relay-bench", "relay-bench-password-7193"


def _child_setup() -> None:
    """In the child before exec: killed with the benchmark (SIGKILL: daphne holding streams
    may sit out a SIGTERM), and room for a connection per stream."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    raise_open_files_limit()


@contextlib.contextmanager
def started(process: ChildProcess):
    """A running process, closed after; its log's tail is shown when it or the run failed, or
    when it logged a traceback (an error a stream may not show)."""
    failed = False
    try:
        process.start()
        yield process
    except BaseException:
        failed = True
        raise
    finally:
        if process.process is not None and (failed or "Traceback" in process.log_text()):
            logger.warning("%s log tail:\n%s", process.name, process.log_tail(60))
        process.close()


def child(name: str, command: list[str], env: dict[str, str], ready_url: str) -> ChildProcess:
    return ChildProcess(name, command, env, ready_url, setup=_child_setup, stop_timeout_s=20.0)


@contextlib.contextmanager
def fresh_database(server_url: str | None, scratch: Path, prefix: str = "relay_bench"):
    """A database URL of the run's own: a SQLite file in `scratch`, or a database created on
    the PostgreSQL server `server_url` and dropped afterwards (the reliability runs use it too)."""
    if not server_url:
        yield f"sqlite:///{scratch / 'db.sqlite3'}"
        return
    import psycopg

    name = f"{prefix}_{os.getpid()}"
    with psycopg.connect(server_url, autocommit=True) as server:
        server.execute(f'CREATE DATABASE "{name}"')
        try:
            yield urlsplit(server_url)._replace(path=f"/{name}").geturl()
        finally:
            server.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def app_env(database_url: str, upstream_url: str, answer_tokens: int) -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "chatapp.settings",
        "DJANGO_SECRET_KEY": "relay-benchmark-only-not-a-secret",
        "DJANGO_DEBUG": "0",
        "DJANGO_LOG_LEVEL": "WARNING",
        "DATABASE_URL": database_url,
        "REDIS_URL": "",
        "INFERENCE_URL": upstream_url,
        "CHAT_MAX_STREAMS_PER_USER": "10000",
        "CHAT_MAX_TOKENS": str(answer_tokens),
        "CHAT_CONTEXT_TOKENS": str(answer_tokens + 2048),
        # Every stream is a conversation's first answer: without Redis its title would be asked
        # of the stand-in from daphne's own process, which is not the relay being measured.
        "CHAT_MODEL_TITLES": "0",
    }


def prepare_database(env: dict[str, str]) -> None:
    """Migrates the fresh database and makes the benchmark's user (manage.py's own commands)."""
    manage = [sys.executable, "manage.py"]
    subprocess.run(manage + ["migrate", "--noinput", "-v", "0"], cwd=REPO_DIR, env=env,
                   check=True, capture_output=True)
    subprocess.run(manage + ["createsuperuser", "--noinput", "--username", USERNAME,
                             "--email", "relay-bench@example.com"], cwd=REPO_DIR, check=True,
                   env={**env, "DJANGO_SUPERUSER_PASSWORD": PASSWORD}, capture_output=True)


def stand_in(interval_ms: float, first_token_ms: float) -> ChildProcess:
    port = free_port()
    return child("stand-in", [sys.executable, "-m", "benchmarks.relay_upstream", "--port",
                              str(port), "--interval-ms", str(interval_ms),
                              "--first-token-ms", str(first_token_ms)],
                 dict(os.environ), f"http://127.0.0.1:{port}/health")


def daphne(env: dict[str, str], counting_queries_in: Path | None = None) -> ChildProcess:
    """A web process; with `counting_queries_in`, one that counts its database queries into that
    file (benchmarks/counted_queries.py)."""
    port = free_port()
    command = commands.daphne(port)
    if counting_queries_in is not None:
        at = command.index(commands.DAPHNE_MODULE)
        command[at:at + 1] = ["benchmarks.counted_queries", str(counting_queries_in)]
    return child("daphne", command, env, f"http://127.0.0.1:{port}/healthz")


def nginx_in_front(daphnes: list[ChildProcess], scratch: Path) -> ChildProcess:
    """nginx with an upstream block of every daphne, from the project's own config."""
    port = free_port()
    servers = [urlsplit(d.ready_url).netloc for d in daphnes]
    directory = Path(tempfile.mkdtemp(prefix="nginx-", dir=scratch))
    config = nginx.render(nginx.NginxSite(listen=f"127.0.0.1:{port}", upstreams=tuple(servers)),
                          directory)
    return child("nginx", nginx.command(config), dict(os.environ),
                 f"http://127.0.0.1:{port}/healthz")


def base_url(process: ChildProcess) -> str:
    parts = urlsplit(process.ready_url)
    return f"{parts.scheme}://{parts.netloc}"
