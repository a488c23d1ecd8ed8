"""The tests' own servers: the app with the probe views under daphne on the test database, and
an ASGI app served from a thread of the test process. The processes themselves are started by
harness/, with stack/'s command lines."""

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from harness.child_process import ChildProcess, running
from harness.ports import free_port
from harness.waiting import wait_until
from stack import commands

# The app plus the probe views (tests/probe_views.py).
PROBE_SETTINGS = "tests.probe_settings"


@contextmanager
def uvicorn_in_thread(app) -> Iterator[str]:
    """Serves an ASGI app on a free loopback port in this process; yields its base URL."""
    port = free_port()
    # A stream a test left hanging is cancelled a second into the shutdown: uvicorn would wait for
    # it forever, and the join below for its 30 s.
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, 30, "uvicorn to start")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def answering(statuses: list[int], heard: list[str] | None = None, body: bytes = b""):
    """An ASGI app that answers each of `statuses` in turn, then the last one for good, with
    `body` (JSON when given; else empty), noting each request as "METHOD target host=Host" in
    `heard`."""

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        if heard is not None:
            host = dict(scope["headers"]).get(b"host", b"").decode()
            heard.append(f"{scope['method']} {scope['path']} host={host}")
        status = statuses.pop(0) if len(statuses) > 1 else statuses[0]
        headers = [(b"content-length", str(len(body)).encode())]
        if body:
            headers.append((b"content-type", b"application/json"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app


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
                      env: dict[str, str] | None = None) -> Iterator[tuple[str, ChildProcess]]:
    """As daphne_on, with the process too (for its log)."""
    port = free_port()
    env = {"DJANGO_SETTINGS_MODULE": PROBE_SETTINGS, "DATABASE_URL": database_url,
           "DJANGO_SECRET_KEY": "test-secret-" + "x" * 40, **(env or {})}
    base_url = f"http://127.0.0.1:{port}"
    with running(commands.daphne(port), env=env, ready_url=base_url + ready_path) as process:
        yield base_url, process


def sign_in(client, user) -> None:
    """Signs `user` (made by tests.factories) in on an httpx2.Client pointed at the app."""
    client.get("/api/auth/session")
    response = client.post("/api/auth/login", json={"username": user.username, "password": "a-long-test-password"},
                           headers={"X-CSRFToken": client.cookies["csrftoken"]})
    assert response.status_code == 200
