"""The admins' live view: every answer streaming now and each inference replica's load, as SSE.

Like the watch stream (chatapp/streaming/watch.py) it reads the shared rows, so it shows the answers held
by every daphne process, and it asks nothing of the relays. Every CHAT_WATCH_INTERVAL_SECONDS
it sends a `live` event: the streams (who, which conversation, since when, how much text is
saved so far: the relay saves it every CHAT_SAVE_INTERVAL_SECONDS) and the replicas' figures.
Reads here are staff-only and cross every owner: only the staff endpoints call them.
"""

import asyncio
import time
from collections.abc import AsyncIterator

from django.conf import settings
from django.db.models.functions import Length
from django.utils import timezone

from ..errors import not_found
from ..models import Generation
from ..runtime.database_threads import on_database_thread
from ..streaming import sse
from ..upstream.replica_figures import replica_loads


def streams_now() -> list[dict]:
    """Every live generation, oldest first, with its user and conversation, in one query."""
    rows = (Generation.objects.filter(status__in=Generation.LIVE_STATUSES)
            .annotate(chars_so_far=Length("final_text"))
            .order_by("started_at", "pk")
            .values("pk", "status", "started_at", "model", "chars_so_far", "user__username",
                    "conversation_id", "conversation__title", "message_id"))
    now = timezone.now()
    return [{"generation_id": row["pk"], "status": row["status"], "model": row["model"],
             "username": row["user__username"], "conversation_id": row["conversation_id"],
             "conversation_title": row["conversation__title"], "message_id": row["message_id"],
             "started_at": row["started_at"].isoformat(),
             "age_s": round((now - row["started_at"]).total_seconds(), 1),
             "chars_so_far": row["chars_so_far"]}
            for row in rows]


def generation_of_anyone(*, generation_id: int) -> Generation:
    try:
        return Generation.objects.get(pk=generation_id)
    except Generation.DoesNotExist:
        raise not_found("generation") from None


async def snapshot() -> dict:
    """The streams and the replicas, read at the same time."""
    streams, replicas = await asyncio.gather(on_database_thread(streams_now)(), replica_loads())
    return {"streams": streams, "replicas": [replica.as_json() for replica in replicas]}


async def events() -> AsyncIterator[bytes]:
    """A `live` event now and every interval after, until the page leaves (Django cancels us)."""
    while True:
        started = time.monotonic()
        yield sse.event("live", await snapshot())
        await asyncio.sleep(max(settings.CHAT_WATCH_INTERVAL_SECONDS - (time.monotonic() - started), 0))
