"""The watch stream: an answer followed live by another page, or resumed by its own, whichever
process holds it.

It joins the answer's live channel (live_channel.py) first, then reads the rows once
for what came before, and announces itself to the relay with the offset it holds; the relay
answers with the text from there and publishes every delta after. A delta whose offset is past
what was sent (a message the layer dropped) is filled from the rows, read again until they hold
the gap. While the channel is quiet for CHAT_WATCH_INTERVAL_SECONDS the rows are read too: a
relay that died, or one that ended without its `end` reaching us. Nothing else reads the
database while the channel delivers. The channel is read ahead, and what came while the last
event was being written leaves as one delta (as the relay's backlog does), so a watcher that
falls behind sends fewer, larger events. A watcher's Stop goes through the stop endpoint.

Events of a watch: `prefix` (the text saved so far), `delta` (only the new characters, as the
relay's), then the relay's own `done` once the row is final (saying `title_requested` as the
relay's does when this watch saw the answer end). A resume (`from`, the characters of this
generation the page holds) starts with `resume` instead, and its deltas go on from that offset.
A Stop cuts the answer to what the stopping page saw, which may be less than this one was sent:
then a `prefix` carries the whole final text, to replace what is shown.
"""

import asyncio
import logging
import time
from collections.abc import AsyncIterator

from channels.layers import get_channel_layer
from django.conf import settings
# redis-py's read timeout is its own class, not Python's TimeoutError.
from redis.exceptions import TimeoutError as RedisTimeoutError

from .. import selectors
from ..models import Generation
from ..runtime.database_threads import on_database_thread
from ..upstream import titles
from . import live_channel, sse

logger = logging.getLogger(__name__)


async def events(generation: Generation, offset: int | None = None) -> AsyncIterator[bytes]:
    """Ends after `done`, or when the browser leaves (Django cancels us, mostly mid-wait)."""
    layer = get_channel_layer()
    channel = await layer.new_channel()
    group = live_channel.live_group(generation.pk)
    await layer.group_add(group, channel)  # before the rows are read: nothing falls between
    try:
        async for event in Watch(generation.pk, layer, channel).events(offset):
            yield event
    finally:  # also when cancelled: a member left behind lingers for a day
        await asyncio.shield(layer.group_discard(group, channel))


class Watch:
    """One watch or resume stream: what it has sent, by offset, and what it still lacks."""

    def __init__(self, generation_id: int, layer, channel: str):
        self.generation_id, self.layer, self.channel = generation_id, layer, channel
        self.read = on_database_thread(selectors.generation_progress)
        self.sent = 0  # characters of this generation's own text the page holds
        self.earlier = 0  # characters of the message before this generation (a continuation's)
        self.held: list[tuple[int, str]] = []  # deltas past a gap, until the rows fill it

    async def events(self, offset: int | None) -> AsyncIterator[bytes]:
        progress = await self.read(generation_id=self.generation_id)
        self.earlier = progress.text_length - progress.own_length
        watched_end = not progress.ended  # an answer ended before is no news of a title
        if offset is None or (progress.ended and progress.own_length < offset):
            yield _prefix(progress)  # a watch, or a resume past a Stop's cut: the whole text
            self.sent = progress.own_length
        else:
            yield _resume(progress, offset)
            self.sent = offset
            if new := self._take(0, progress.text_after[self.earlier:]):
                yield sse.delta(new)
        if not progress.ended:
            async for event in self._live():
                if isinstance(event, selectors.Progress):
                    progress = event
                else:
                    yield event
            if progress.own_length < self.sent:  # cut by a Stop to less than we sent
                progress = await self.read(generation_id=self.generation_id)
                yield _prefix(progress)
            elif new := self._fill(progress):
                yield sse.delta(new)
        title_requested = watched_end and await on_database_thread(titles.asked_for_watched)(
            generation=progress.generation, continued=progress.own_length < progress.text_length)
        yield sse.done(progress.generation, title_requested=title_requested)

    async def _live(self):
        """Deltas as the relay publishes them, then the final rows (a Progress) once it ended.
        Whatever came meanwhile leaves as one event: a watcher that falls behind sends fewer,
        larger events, as the relay does."""
        presence = live_channel.presence_interval()
        next_announce = time.monotonic()
        last_sent = last_heard = time.monotonic()
        inbox = _Inbox(self.layer, self.channel)
        try:
            while True:
                now = time.monotonic()
                if now >= next_announce:
                    await live_channel.tell_relay(self.generation_id,
                                                  live_channel.reader_message(self.channel, self.sent))
                    next_announce = now + presence
                wait = min(next_announce, last_sent + settings.CHAT_HEARTBEAT_SECONDS,
                           last_heard + settings.CHAT_WATCH_INTERVAL_SECONDS) - now
                messages = await inbox.take(max(wait, 0))
                now = time.monotonic()
                text, has_ended = "", False
                for message in messages:
                    if message.get("type") == live_channel.DELTA:
                        text += await self._deliver(message.get("offset"), message.get("text"))
                    has_ended = has_ended or message.get("type") == live_channel.END
                if messages:
                    last_heard = now
                if has_ended or now >= last_heard + settings.CHAT_WATCH_INTERVAL_SECONDS:
                    last_heard = now  # the end, or the channel is quiet: what the rows have
                    progress = await self.read(generation_id=self.generation_id, after=self.earlier + self.sent)
                    if progress.ended:
                        if text:
                            yield sse.delta(text)
                        yield progress
                        return
                    text += self._fill(progress)
                if text:
                    yield sse.delta(text)
                    last_sent = time.monotonic()
                elif now >= last_sent + settings.CHAT_HEARTBEAT_SECONDS:
                    yield sse.HEARTBEAT
                    last_sent = now
        finally:
            inbox.close()

    async def _deliver(self, offset, text) -> str:
        """The part of a published delta the page lacks; a gap before it is filled from the rows."""
        if not isinstance(offset, int) or not isinstance(text, str):
            return ""
        if offset > self.sent:
            self.held.append((offset, text))
            return self._fill(await self.read(generation_id=self.generation_id, after=self.earlier + self.sent))
        return self._take(offset, text) + self._release_held()

    def _fill(self, progress: selectors.Progress) -> str:
        """What the rows hold past what was sent (they are read from there on)."""
        return self._take(self.sent, progress.text_after) + self._release_held()

    def _take(self, offset: int, text: str) -> str:
        new = text[self.sent - offset:] if offset + len(text) > self.sent else ""
        self.sent += len(new)
        return new

    def _release_held(self) -> str:
        released = ""
        self.held.sort()
        while self.held and self.held[0][0] <= self.sent:
            released += self._take(*self.held.pop(0))
        return released


class _Inbox:
    """The watch's channel, read ahead by a task of its own, so that everything waiting is taken
    at once."""

    def __init__(self, layer, channel: str):
        self._messages: list[dict] = []
        self._ready = asyncio.Event()
        self._reading = asyncio.create_task(self._read(layer, channel))

    async def take(self, wait: float) -> list[dict]:
        """What came, or [] when nothing did within `wait` seconds."""
        if not self._messages:
            self._ready.clear()
            try:
                async with asyncio.timeout(wait):
                    await self._ready.wait()
            except TimeoutError:
                return []
        taken, self._messages = self._messages, []
        return taken

    def close(self) -> None:
        self._reading.cancel()

    async def _read(self, layer, channel: str) -> None:
        while True:
            try:
                message = await layer.receive(channel)
            except (TimeoutError, RedisTimeoutError):  # the layer's own wait may end (BRIEF §12)
                continue
            except Exception:  # the watch reads the rows while the channel is quiet
                logger.exception("the live channel %s failed", channel)
                return
            self._messages.append(message)
            self._ready.set()


def _prefix(progress: selectors.Progress) -> bytes:
    generation = progress.generation
    return sse.event("prefix", {"generation_id": generation.pk, "message_id": generation.message_id,
                                "status": generation.status, "text": progress.text_after,
                                # The text's first characters that came before this generation (a
                                # continued answer's): a Stop's seen_chars does not count them.
                                "earlier_chars": progress.text_length - progress.own_length,
                                # As the answer's `start`: two of these silent is a stalled watch,
                                # and a lost watch may resume within the grace period.
                                "heartbeat_s": settings.CHAT_HEARTBEAT_SECONDS,
                                "resume_grace_s": settings.CHAT_RESUME_GRACE_SECONDS})


def _resume(progress: selectors.Progress, offset: int) -> bytes:
    generation = progress.generation
    return sse.event("resume", {"generation_id": generation.pk, "message_id": generation.message_id,
                                "status": generation.status,
                                # The deltas that follow go on from this character of the
                                # generation's own text: the one the page asked from.
                                "offset": offset, "earlier_chars": progress.text_length - progress.own_length,
                                "heartbeat_s": settings.CHAT_HEARTBEAT_SECONDS,
                                "resume_grace_s": settings.CHAT_RESUME_GRACE_SECONDS})
