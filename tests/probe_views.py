"""Views that exist only in tests: a paced stream of small events, a CSRF-guarded POST, the
count of database connections this process has opened, the thread a sync view runs on, the
kind of event loop the process runs, and a view that fails."""

import asyncio
import json
import threading

from django.db.backends.signals import connection_created
from django.http import JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import ensure_csrf_cookie
from django.views.decorators.http import require_http_methods

_connections = {"opened": 0}
_connections_lock = threading.Lock()


def _count_connection(sender, connection, **kwargs):
    with _connections_lock:
        _connections["opened"] += 1


connection_created.connect(_count_connection)

EVENT_COUNT = 40
EVENT_INTERVAL_S = 0.05


async def small_events(request):
    """40 events of about 50 bytes, one every 50 ms: small enough for a buffer to hold them all.

    `?accel_header=0` leaves out X-Accel-Buffering, as an app that forgot it would.
    """

    async def events():
        for index in range(EVENT_COUNT):
            yield f"data: {json.dumps({'n': index, 'pad': 'x' * 16})}\n\n".encode()
            await asyncio.sleep(EVENT_INTERVAL_S)  # the stream's own pace, not a wait in a test

    response = StreamingHttpResponse(events(), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    if request.GET.get("accel_header") != "0":
        response["X-Accel-Buffering"] = "no"
    return response


@ensure_csrf_cookie
@require_http_methods(["GET", "POST"])
def echo(request):
    """GET hands out the CSRF cookie; POST (guarded by CsrfViewMiddleware) echoes the body."""
    if request.method == "GET":
        return JsonResponse({"ok": True})
    return JsonResponse({"ok": True, "received": json.loads(request.body or b"{}")})


async def connections_opened(request):
    """How many database connections this process has opened so far (it opens none itself)."""
    with _connections_lock:
        return JsonResponse(dict(_connections))


def thread_name(request):
    """A sync view: Django runs it through a thread-sensitive sync_to_async."""
    return JsonResponse({"thread": threading.current_thread().name})


async def event_loop(request):
    loop = type(asyncio.get_running_loop())
    return JsonResponse({"loop": f"{loop.__module__}.{loop.__qualname__}"})


class ProbeFailure(Exception):
    """What the failing probe raises: an error no view expects."""


async def failure(request):
    raise ProbeFailure("the probe fails on purpose, for the 500 answer")
