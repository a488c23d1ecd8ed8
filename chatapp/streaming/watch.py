"""The watch stream: an answer followed from its rows by another page, whichever process holds it.

The relay saves an answer's text every CHAT_SAVE_INTERVAL_SECONDS; a watcher reads the rows
every CHAT_WATCH_INTERVAL_SECONDS on a database thread and sends what grew. Nothing here
touches the relay, so an answer nobody watches costs nothing more per token, and a watcher
needs no channel to the process that streams the answer: the rows are shared. A watcher's Stop
goes through the stop endpoint like any other.

Events: `prefix` (the text saved so far), `delta` (only the new characters, as the relay's),
then the relay's own `done` once the row is final (saying `title_requested` as the relay's does
when this watch saw the answer end). A Stop cuts the answer to what the stopping
page saw, which may be less than this one was sent: then a second `prefix` carries the whole
final text, to replace what is shown.
"""

import asyncio
import time
from collections.abc import AsyncIterator

from django.conf import settings

from .. import selectors
from ..models import Generation
from ..runtime.database_threads import on_database_thread
from ..upstream import titles
from . import sse


async def events(generation: Generation) -> AsyncIterator[bytes]:
    """Ends after `done`, or when the browser leaves (Django cancels us, mostly mid-wait)."""
    read = on_database_thread(selectors.generation_progress)
    progress = await read(generation_id=generation.pk)
    yield _prefix(progress)
    watched_end = not progress.ended  # an answer ended before is no news of a title
    sent, last_sent = progress.text_length, time.monotonic()
    next_read = last_sent + settings.CHAT_WATCH_INTERVAL_SECONDS
    while not progress.ended:
        ping_due = last_sent + settings.CHAT_HEARTBEAT_SECONDS
        await asyncio.sleep(max(min(next_read, ping_due) - time.monotonic(), 0))
        if time.monotonic() >= next_read:
            progress = await read(generation_id=generation.pk, after=sent)
            next_read = time.monotonic() + settings.CHAT_WATCH_INTERVAL_SECONDS
            if progress.text_length < sent:  # cut by a Stop to less than we sent
                progress = await read(generation_id=generation.pk)
                yield _prefix(progress)
            elif progress.text_after:
                yield sse.delta(progress.text_after)
            sent = progress.text_length
            if progress.text_after:
                last_sent = time.monotonic()
                continue
        if time.monotonic() >= ping_due:
            yield sse.HEARTBEAT
            last_sent = time.monotonic()
    title_requested = watched_end and await on_database_thread(titles.asked_for_watched)(
        generation=progress.generation, continued=progress.own_length < progress.text_length)
    yield sse.done(progress.generation, title_requested=title_requested)


def _prefix(progress: selectors.Progress) -> bytes:
    generation = progress.generation
    return sse.event("prefix", {"generation_id": generation.pk, "message_id": generation.message_id,
                                "status": generation.status, "text": progress.text_after,
                                # The text's first characters that came before this generation (a
                                # continued answer's): a Stop's seen_chars does not count them.
                                "earlier_chars": progress.text_length - progress.own_length,
                                # As the answer's `start`: two of these silent is a stalled watch.
                                "heartbeat_s": settings.CHAT_HEARTBEAT_SECONDS})
