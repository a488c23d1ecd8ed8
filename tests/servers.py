"""Starting and stopping real servers (daphne, nginx, the stack) from tests."""

import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import uvicorn

REPO_DIR = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def free_port_run(count: int) -> int:
    """The first of `count` consecutive free ports, below the kernel's ephemeral range.

    The stack gives its web processes consecutive ports. A port from the ephemeral range is
    free only for now: the next outgoing connection (to PostgreSQL, Redis, a web process) may
    take the one after it as its local port and keep it, and a web process can never bind it.
    """
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for first in random.sample(range(10000, low - count), 200):
        if all(_bindable(port) for port in range(first, first + count)):
            return first
    raise RuntimeError(f"no {count} consecutive free ports below {low}")


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Polls `condition` until it holds; fails loudly with `what` when the deadline passes."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code < 500
    except httpx.TransportError:
        return False


def healthy(url: str) -> bool:
    """`url` (a health check) answers 200."""
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def running(command: list[str], *, ready_url: str, env: dict[str, str] | None = None,
            timeout_s: float = 60, stop_signal: int = signal.SIGTERM) -> Iterator[subprocess.Popen]:
    """Runs `command` in its own process group until the block ends; ready when `ready_url` answers.

    Its output goes to a file (read it with `output_of`): a pipe nobody drains fills up and
    blocks the server in the middle of writing a traceback.
    """
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(
        command,
        cwd=REPO_DIR,
        env={**os.environ, **(env or {})},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    process.log = log
    try:
        wait_until(
            lambda: process.poll() is not None or answers(ready_url), timeout_s, ready_url
        )
        if process.poll() is not None:
            raise RuntimeError(f"{command[:3]} exited early:\n{output_of(process)}")
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, stop_signal)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        log.close()


def output_of(process: subprocess.Popen) -> str:
    """What a process started by `running` has written so far."""
    process.log.seek(0)
    return process.log.read().decode(errors="replace")


def daphne_command(port: int, settings_module: str = "tests.probe_settings") -> tuple[list[str], dict]:
    return (
        [sys.executable, "-m", "stack.daphne_uvloop", "-b", "127.0.0.1", "-p", str(port), "chatapp.asgi:application"],
        {"DJANGO_SETTINGS_MODULE": settings_module},
    )


@contextmanager
def uvicorn_in_thread(app) -> Iterator[str]:
    """Serves an ASGI app on a free loopback port in this process; yields its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, 30, "uvicorn to start")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def shared_database_url() -> str:
    """The test database as a URL, for a server process that must see the test's rows.

    Only tests that commit (transactional_db) let another process see their data.
    """
    from django.db import connection

    settings = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{settings['NAME']}"
    return (f"postgres://{settings['USER']}:{settings['PASSWORD']}@{settings['HOST'] or '127.0.0.1'}:"
            f"{settings['PORT'] or 5432}/{settings['NAME']}")


@contextmanager
def daphne_on(database_url: str, ready_path: str = "/healthz",
              env: dict[str, str] | None = None) -> Iterator[str]:
    """The app with the probe views under daphne on `database_url`, with `env` on top of ours;
    yields its base URL."""
    with daphne_process_on(database_url, ready_path, env) as (base_url, _):
        yield base_url


@contextmanager
def daphne_process_on(database_url: str, ready_path: str = "/healthz",
                      env: dict[str, str] | None = None) -> Iterator[tuple[str, subprocess.Popen]]:
    """As daphne_on, with the process too (for its log: `output_of`)."""
    port = free_port()
    command, daphne_env = daphne_command(port)
    env = daphne_env | {"DATABASE_URL": database_url, "DJANGO_SECRET_KEY": "test-secret-" + "x" * 40,
                        **(env or {})}
    base_url = f"http://127.0.0.1:{port}"
    with running(command, env=env, ready_url=base_url + ready_path) as process:
        yield base_url, process


def sign_in(client, user) -> None:
    """Signs `user` (made by tests.factories) in on an httpx.Client pointed at the app."""
    client.get("/api/auth/session")
    response = client.post("/api/auth/login", json={"username": user.username, "password": "a-long-test-password"},
                           headers={"X-CSRFToken": client.cookies["csrftoken"]})
    assert response.status_code == 200


@contextmanager
def nginx_and_daphne(env: dict[str, str], tmp_dir: Path) -> Iterator[str]:
    """The app as users reach it: daphne with `env`, nginx in front serving frontend/."""
    from stack import nginx

    daphne_port, public_port = free_port(), free_port()
    daphne = [sys.executable, "-m", "stack.daphne_uvloop", "-b", "127.0.0.1", "-p", str(daphne_port),
              "chatapp.asgi:application"]
    site = nginx.NginxSite(listen=f"127.0.0.1:{public_port}", upstreams=(f"127.0.0.1:{daphne_port}",))
    config = nginx.render(site, tmp_dir / "nginx")
    with running(daphne, env=env, ready_url=f"http://127.0.0.1:{daphne_port}/healthz"), \
            running(nginx.command(config), ready_url=f"http://127.0.0.1:{public_port}/healthz"):
        yield f"http://127.0.0.1:{public_port}"
