"""An answer's live channel as one web process hears it: one subscription, shared by every watch
and resume stream of that answer in the process (watch.py).

Each watcher used to be a channel of its own in the answer's live group: a delta was a layer
message, a wake-up and a copy per watcher, and each announced itself to the relay and got its
own catch-up. Now a process has one hub per answer it is watched in: one channel in the group,
one task reading it, one announcement to the relay at once and every presence interval (with the
offset up to which the hub holds the text, so that the relay sends what it lacks once), and one
read of the rows when the channel is quiet, a gap stays open or the answer ends. The hub keeps
the answer's text by offset (live_text.py); a watcher is a cursor into it, woken in memory when
it grows. A delta costs the layer one message per web process, and the database nothing
(BENCHMARKS.md, "Watchers and resumes").

A gap (a delta the layer dropped) is asked of the relay at once, by announcing the hub again,
and read from the rows if still open a watch interval later. The hub is made when the first
watcher of an answer joins and closed when the last one leaves; while it lives it joins its group
again every live_channel.REJOIN_SECONDS and listens again after its layer failed, as a relay's
stop listener does, so that a Redis restart leaves its watchers on the rows for seconds only.
"""

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

from channels.layers import get_channel_layer
from django.conf import settings
# redis-py's read timeout is its own class, not Python's TimeoutError.
from redis.exceptions import TimeoutError as RedisTimeoutError

from .. import selectors
from ..runtime.database_outage import log_failure
from ..runtime.database_threads import on_database_thread
from ..runtime.held_tasks import held_until_done
from ..runtime.per_loop import per_loop
from ..upstream import titles
from . import live_channel
from .live_text import LiveText

logger = logging.getLogger(__name__)
_hubs = per_loop(dict)  # generation id -> its hub, in this process's loop


@dataclass(frozen=True)
class Final:
    """The answer's final rows, read once for all the hub's watchers."""

    progress: selectors.Progress  # its text from the message's first character
    title_requested: bool  # said to a page that watched the answer end


@contextlib.asynccontextmanager
async def joined(generation_id: int):
    """The answer's hub in this process, subscribed to its live channel, while the block runs."""
    hubs = _hubs()
    hub = hubs.get(generation_id)
    if hub is None:
        hub = hubs[generation_id] = LiveHub(generation_id)
    hub.watchers += 1
    try:
        await asyncio.shield(hub.subscribed)  # one watcher leaving does not undo the others' join
        yield hub
    finally:
        hub.watchers -= 1
        if hub.watchers == 0:
            if hubs.get(generation_id) is hub:
                del hubs[generation_id]
            hub.close()


class LiveHub:
    def __init__(self, generation_id: int):
        self.generation_id = generation_id
        self.text = LiveText()  # this generation's own text
        self.stored = 0  # code points of that text the rows hold, as far as the hub heard
        self.final: Final | None = None
        self.changed = asyncio.Event()  # set, then replaced, whenever the text grows or the answer ends
        self.watchers = 0
        self._layer = get_channel_layer()
        self._channel: str | None = None
        self._earlier: int | None = None  # characters of the message before this generation's
        self._last_heard = time.monotonic()
        self._gap_since: float | None = None
        self._due = asyncio.Event()  # the keeper has something to do at once
        self._announce_now = self._final_heard = False
        self._tasks: list[asyncio.Task] = []
        self.subscribed = asyncio.ensure_future(self._subscribe())

    def heard_rows(self, progress: selectors.Progress) -> None:
        """A watcher read the rows (from the message's first character) after joining: their
        text joins the hub's; the first such read starts the hub's reading and announcing."""
        if self.final is not None:
            return  # read before the end: a Stop may have cut the text shorter since
        if self._earlier is None:
            self._earlier = progress.text_length - progress.own_length
        self._take(0, progress.text_after[self._earlier:])
        self.stored = max(self.stored, progress.own_length)
        if not self._tasks:
            self._tasks = [asyncio.create_task(work)
                           for work in (self._receive(), self._keep(), self._stay_member())]

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        held_until_done(self._unsubscribe())  # leaving the group, awaited by nobody

    async def _subscribe(self) -> None:
        """Joins the answer's live group. A join that fails (Redis down or silent) fails no
        watcher: the keeper reads the rows, as it does while the channel is quiet."""
        self._channel = await self._layer.new_channel()
        await live_channel.join(self._layer, live_channel.live_group(self.generation_id), self._channel,
                                f"joining the live channel of generation {self.generation_id} failed; "
                                "its watchers read the rows")

    async def _unsubscribe(self) -> None:
        """Also after a join that failed or was cancelled: a member left behind lingers for a day."""
        try:
            async with asyncio.timeout(live_channel.LAYER_WITHIN_SECONDS):
                await self.subscribed
            await live_channel.leave(self._layer, live_channel.live_group(self.generation_id), self._channel)
        except Exception:
            logger.exception("leaving the live channel of generation %s failed", self.generation_id)

    def _take(self, offset: int, text: str) -> None:
        if self.final is not None:
            return
        grew = self.text.add(offset, text)
        if not self.text.has_gap():
            self._gap_since = None
        elif self._gap_since is None:  # the relay's answer to an announcement fills it
            self._gap_since = time.monotonic()
            self._announce_now = True
            self._due.set()
        if grew:
            self.wake()

    def wake(self) -> None:
        """Wakes every watcher waiting for the text to grow (or for a watch of it to end)."""
        self.changed.set()
        self.changed = asyncio.Event()

    async def _receive(self) -> None:
        """Hears the relay's deltas for as long as the hub lives. A layer that fails (Redis down,
        or its connections from before a restart failing once each) is listened to again every
        live_channel.REJOIN_SECONDS, as the hub joins its group again (_stay_member); the keeper
        reads the rows meanwhile, as it does while the channel is quiet."""
        await live_channel.until_it_works(self._heard, f"the live channel of generation "
                                                       f"{self.generation_id} failed; its watchers read the rows")

    async def _heard(self) -> None:
        while True:
            try:
                message = await self._layer.receive(self._channel)
            except (TimeoutError, RedisTimeoutError):  # the layer's own wait may end (BRIEF §12)
                continue
            self._last_heard = time.monotonic()
            offset, text, saved = message.get("offset"), message.get("text"), message.get("saved")
            if message.get("type") == live_channel.DELTA and isinstance(offset, int) and isinstance(text, str):
                self._take(offset, text)
                if isinstance(saved, int):
                    self.stored = max(self.stored, saved)
            elif message.get("type") == live_channel.END:
                self._final_heard = True
                self._due.set()

    async def _stay_member(self) -> None:
        """A Redis restarted empty forgot the hub's member of the live group: joined again every
        live_channel.REJOIN_SECONDS, so that deltas come live again (a gap the outage left is
        then asked of the relay, as any gap is)."""
        await self.subscribed
        await live_channel.stay_member(self._layer, live_channel.live_group(self.generation_id), self._channel,
                                       f"joining the live channel of generation {self.generation_id} again failed")

    async def _keep(self) -> None:
        """Announces the hub (at once, every presence interval, and for a gap), and reads the rows
        when the answer ended, the channel is quiet (a relay that died, an `end` lost), or a gap
        stays open for a watch interval."""
        presence, quiet = live_channel.presence_interval(), settings.CHAT_WATCH_INTERVAL_SECONDS
        next_announce = time.monotonic()
        while self.final is None:
            self._due.clear()
            now = time.monotonic()
            if self._announce_now or now >= next_announce:
                self._announce_now, next_announce = False, now + presence
                await self._announce()
            gap_stays = self._gap_since is not None and now - self._gap_since >= quiet
            if self._final_heard or gap_stays or now - self._last_heard >= quiet:
                whole, self._final_heard, self._last_heard = self._final_heard, False, now
                if gap_stays:
                    self._gap_since = now
                await self._read_rows(whole)  # failed: read again once the channel is quiet
                continue
            deadlines = [next_announce, self._last_heard + quiet]
            if self._gap_since is not None:
                deadlines.append(self._gap_since + quiet)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(min(deadlines) - time.monotonic(), 0)):
                    await self._due.wait()

    async def _announce(self) -> None:
        try:
            await live_channel.tell_relay(self.generation_id,
                                          live_channel.reader_message(self._channel, self.text.end))
        except Exception:  # said again within a presence interval; the rows meanwhile
            logger.exception("announcing the watchers of generation %s failed", self.generation_id)

    async def _read_rows(self, whole: bool) -> None:
        """The rows past the hub's text (`whole`: the answer's final rows, all of its text)."""
        read = on_database_thread(selectors.generation_progress)
        after = 0 if whole else self._earlier + self.text.end
        try:
            progress = await read(generation_id=self.generation_id, after=after)
            if progress.ended and after:  # the final text whole: a Stop may have cut it shorter
                progress = await read(generation_id=self.generation_id)
            if progress.ended:
                await self._settle(progress)
            else:
                self._take(max(after - self._earlier, 0), progress.text_after[max(self._earlier - after, 0):])
                self.stored = max(self.stored, progress.own_length)
        except Exception:  # read again within a watch interval
            log_failure(logger, "reading the rows of generation %s failed", self.generation_id)

    async def _settle(self, progress: selectors.Progress) -> None:
        continued = progress.own_length < progress.text_length
        title_requested = await on_database_thread(titles.asked_for_watched)(
            generation=progress.generation, continued=continued)
        self.text.settle(progress.text_after[progress.text_length - progress.own_length:])
        self.final = Final(progress, title_requested)
        self._tasks[0].cancel()  # the channel has no more to say
        self.wake()
