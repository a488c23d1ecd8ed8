"""The ASGI handler starts no thread per request: sync work shares one thread, as under WSGI."""

import json

from asgiref.testing import ApplicationCommunicator
from django.core.handlers.asgi import ASGIHandler

from chatapp.runtime.asgi_handler import SharedThreadASGIHandler


async def thread_of_one_request(handler) -> str:
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
             "scheme": "http", "path": "/api/_probe/thread", "raw_path": b"/api/_probe/thread",
             "query_string": b"", "root_path": "", "headers": [(b"host", b"testserver")],
             "client": ("127.0.0.1", 50000), "server": ("testserver", 80)}
    request = ApplicationCommunicator(handler, scope)
    await request.send_input({"type": "http.request", "body": b""})
    assert (await request.receive_output(timeout=10))["status"] == 200
    body = await request.receive_output(timeout=10)
    await request.wait(timeout=10)
    return json.loads(body["body"])["thread"]


async def test_sync_views_of_consecutive_requests_run_on_one_shared_thread(settings):
    settings.ROOT_URLCONF = "tests.probe_urls"
    threads = {await thread_of_one_request(SharedThreadASGIHandler()) for _ in range(4)}
    assert len(threads) == 1


async def test_djangos_own_handler_would_start_a_thread_for_each_request(settings):
    """What the handler exists to avoid (if Django stops doing this, the handler can go)."""
    settings.ROOT_URLCONF = "tests.probe_urls"
    threads = {await thread_of_one_request(ASGIHandler()) for _ in range(4)}
    assert len(threads) == 4
