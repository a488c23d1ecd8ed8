"""Django's middleware hooks run on the event loop under ASGI, except where they may write."""

import threading

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.test import AsyncClient

from chatapp.runtime import middleware

pytestmark = pytest.mark.django_db(transaction=True)

HOOKS = ("process_request", "process_view", "process_response")


@pytest.fixture(autouse=True)
async def close_worker_connections():
    yield
    await sync_to_async(connections.close_all)()  # or the test database cannot be dropped


@pytest.fixture
def hook_threads(monkeypatch):
    """(middleware class, hook) -> the thread it last ran in, for every hook of our stack."""
    seen: dict[tuple[str, str], int] = {}
    for name in ("Security", "Session", "Common", "Csrf", "Authentication", "Messages", "XFrameOptions"):
        ours = getattr(middleware, name)
        django_class = ours.__mro__[2]  # ours -> _OnTheLoop -> Django's own
        for hook in HOOKS:
            original = django_class.__dict__.get(hook)
            if original is None:
                continue

            def recording(self, *args, _original=original, _key=(name, hook)):
                seen[_key] = threading.get_ident()
                return _original(self, *args)

            monkeypatch.setattr(django_class, hook, recording)
    return seen


async def test_every_hook_of_a_plain_request_runs_on_the_event_loop(hook_threads):
    client = AsyncClient()

    response = await client.get("/api/auth/session")

    assert response.status_code == 200
    assert response["X-Frame-Options"] == "DENY" and "csrftoken" in response.cookies
    assert len(hook_threads) >= 8  # every hook of the stack ran...
    assert set(hook_threads.values()) == {threading.get_ident()}  # ...in the loop's own thread


async def test_a_sign_in_saves_its_session_from_the_worker_thread_and_csrf_still_holds(user, hook_threads):
    client = AsyncClient(enforce_csrf_checks=True)
    await client.get("/api/auth/session")
    token = client.cookies["csrftoken"].value
    credentials = {"username": user.username, "password": "a-long-test-password"}

    refused = await client.post("/api/auth/login", credentials, content_type="application/json")
    hook_threads.clear()
    signed_in = await client.post("/api/auth/login", credentials, content_type="application/json",
                                  headers={"X-CSRFToken": token})
    session_saved_in = hook_threads[("Session", "process_response")]
    after = await client.get("/api/auth/session")

    assert refused.status_code == 403
    assert signed_in.status_code == 200
    assert session_saved_in != threading.get_ident()  # the session row is written off the loop
    assert after.json()["user"]["username"] == user.username

