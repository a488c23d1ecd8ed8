"""The admins' live view: every answer streaming now and each inference replica's load, as SSE.

Like the watch stream (chatapp/streaming/watch.py) it reads the shared rows, so it shows the answers held
by every daphne process, and it asks nothing of the relays. Every CHAT_WATCH_INTERVAL_SECONDS
it sends a `live` event: the streams (who, which conversation, since when, how much text is
saved so far: the relay saves it every CHAT_SAVE_INTERVAL_SECONDS) and the replicas' figures.
Its reads cross every owner (staff/selectors.py): only the staff endpoints call it.
"""

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from django.conf import settings

from ..runtime.database_threads import on_database_thread
from ..streaming import sse
from ..upstream.replica_figures import replica_loads
from . import selectors


async def snapshot() -> dict:
    """The streams and the replicas, read at the same time."""
    streams, replicas = await asyncio.gather(on_database_thread(selectors.streams_now)(), replica_loads())
    return {"streams": streams, "replicas": [replica.as_json() for replica in replicas]}


async def events(may_see: Callable[[], Awaitable[bool]]) -> AsyncIterator[bytes]:
    """A `live` event now and every interval after, until the page leaves (Django cancels us), or
    until `may_see()` no longer holds (the admin signed out elsewhere, or is staff no more): the
    stream ends then, as its first request would be refused."""
    while True:
        started = time.monotonic()
        if not await may_see():
            return
        yield sse.event("live", await snapshot())
        await asyncio.sleep(max(settings.CHAT_WATCH_INTERVAL_SECONDS - (time.monotonic() - started), 0))
