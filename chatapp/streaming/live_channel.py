"""An answer's live channel: its text, by character offset, to every page that reads it from
anywhere but the relay's own connection (a watch, a resume: watch.py), over the channel
layer (Redis across processes, in memory within one).

Two groups per answer. The relay listens on its inbox (`relay_group`): a Stop, and readers
announcing themselves (`generation.reader`, with their channel and the offset up to which they
hold the text) when they join and every `presence_interval()` after. A reader is a web process's
hub of the answer (live_hub.py), one for all of that process's watchers of it. The relay answers each
announcement with the text it holds from that offset, sent to that reader alone, and from the
first one on publishes every delta to the readers' group (`live_group`). Offsets count the code
points of this generation's own text, as a Stop's `seen_chars` does.

Publishing never waits: the relay hands a delta in, and one task per answer sends, in order,
what is waiting (deltas that queued up meanwhile leave as one message). While nobody reads from
elsewhere nothing is sent, so an answer nobody watches costs the layer nothing per token.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from channels.layers import get_channel_layer
from django.conf import settings
from redis.exceptions import ConnectionError as RedisConnectionError

from ..runtime.held_tasks import held_until_done

logger = logging.getLogger(__name__)

DELTA, END, READER, STOP = "generation.delta", "generation.end", "generation.reader", "generation.stop"
# A reader silent for this many presence intervals has left.
_PRESENCE_INTERVALS = 3
# How long one message to the layer, or a leaving of its group, may take. The layer's connection
# to Redis has no socket timeout (settings.py says why), so a Redis that answers nothing would
# hold these for ever: a Stop's response, a relay's publishing, a finished relay's leaving. What
# is not sent is no loss: the rows hold it (a relay's heartbeat reads a Stop there, a reader
# reads a gap there), and a member left behind expires with its group (the layer's group expiry).
LAYER_WITHIN_SECONDS = 5.0
# How often a member of a group (a relay's stop listener, a hub) joins it again, since a restarted
# Redis forgot it, and a listener whose layer failed listens again.
REJOIN_SECONDS = 2.0


def relay_group(generation_id: int) -> str:
    return f"generation-stop-{generation_id}"


def live_group(generation_id: int) -> str:
    return f"generation-live-{generation_id}"


def presence_interval() -> float:
    """How often a reader says it is there: often enough that the grace period never ends
    under a reader, and within the heartbeat."""
    grace = settings.CHAT_RESUME_GRACE_SECONDS
    return min(settings.CHAT_HEARTBEAT_SECONDS, grace / 4) if grace > 0 else settings.CHAT_HEARTBEAT_SECONDS


def reader_message(channel: str, offset: int) -> dict:
    return {"type": READER, "channel": channel, "offset": offset}


class LivePublisher:
    """One answer's side of the channel, on the relay's event loop. Each text it sends says how
    much of the answer's own text the relay's partial saves have stored (`saved`, code points,
    read from `saved_chars` as it goes out), for the readers' pages (docs/api.md)."""

    def __init__(self, generation_id: int, saved_chars: Callable[[], int] = lambda: 0):
        self._group = live_group(generation_id)
        self._saved_chars = saved_chars
        self._waiting: list[tuple[str | None, dict]] = []  # (a reader's channel, or None: the group)
        self._task: asyncio.Task | None = None
        self.reader_seen_at: float | None = None  # monotonic: the last announcement

    def is_read_elsewhere(self) -> bool:
        return (self.reader_seen_at is not None
                and time.monotonic() - self.reader_seen_at < _PRESENCE_INTERVALS * presence_interval())

    def reader(self, message: dict, text: str) -> None:
        """A reader announced itself: from now on deltas go out, and it gets what it lacks."""
        self.reader_seen_at = time.monotonic()
        offset, channel = message.get("offset"), message.get("channel")
        if isinstance(offset, int) and isinstance(channel, str) and 0 <= offset < len(text):
            self._hand_in(channel, {"type": DELTA, "offset": offset, "text": text[offset:]})

    def delta(self, offset: int, text: str) -> None:
        if not self.is_read_elsewhere():
            return
        last = self._waiting[-1][1] if self._waiting and self._waiting[-1][0] is None else None
        if last is not None and last["type"] == DELTA and last["offset"] + len(last["text"]) == offset:
            last["text"] += text  # still waiting: it leaves with the one before
        else:
            self._hand_in(None, {"type": DELTA, "offset": offset, "text": text})

    def end(self) -> None:
        """The answer's rows are final: readers read them (sent even to nobody seen: one message)."""
        self._hand_in(None, {"type": END})

    def _hand_in(self, channel: str | None, message: dict) -> None:
        self._waiting.append((channel, message))
        if self._task is None:
            self._task = held_until_done(self._send_waiting())

    async def _send_waiting(self) -> None:
        layer = get_channel_layer()
        try:
            while self._waiting:
                channel, message = self._waiting.pop(0)
                if message["type"] == DELTA:
                    message["saved"] = self._saved_chars()
                try:
                    async with asyncio.timeout(LAYER_WITHIN_SECONDS):
                        if channel is None:
                            await layer.group_send(self._group, message)
                        else:
                            await layer.send(channel, message)
                except Exception:  # readers notice the gap by offset and read the rows
                    logger.exception("publishing on the live channel %s failed", self._group)
        finally:
            self._task = None


async def leave(layer, group: str, channel: str) -> None:
    """`channel` leaves `group`; once what was already on its way to it has arrived, the layer
    forgets it. channels_redis hands every message for a channel of this process to that
    channel's buffer, read or not, and keeps the buffer for the process's life: a watcher gone
    mid-answer left the deltas sent as it went, up to 100 messages a channel."""
    try:
        async with asyncio.timeout(LAYER_WITHIN_SECONDS):
            await layer.group_discard(group, channel)
        await asyncio.sleep(LAYER_WITHIN_SECONDS)  # the late ones, sent before it left
    finally:
        getattr(layer, "receive_buffer", {}).pop(channel, None)


async def tell_relay(generation_id: int, message: dict) -> None:
    """A message to the relay of this answer, in whichever process it runs (a Stop's tells:
    relay_inbox.tell_relay_to_stop)."""
    async with asyncio.timeout(LAYER_WITHIN_SECONDS):
        await once_more_if_lost(lambda: get_channel_layer().group_send(relay_group(generation_id), message))


async def once_more_if_lost(command: Callable[[], Awaitable]) -> None:
    """`command()` on the layer, and once more if its connection was lost: one pooled from before
    Redis restarted fails as it is next used, and redis-py connects it afresh."""
    try:
        await command()
    except RedisConnectionError:
        await command()


async def join(layer, group: str, channel: str, failed: str) -> None:
    """`channel` joins `group` once, within LAYER_WITHIN_SECONDS; a failure is logged as
    `failed` and no more (the caller's fallback reads the rows, and stay_member joins again)."""
    try:
        async with asyncio.timeout(LAYER_WITHIN_SECONDS):
            await once_more_if_lost(lambda: layer.group_add(group, channel))
    except Exception:
        logger.exception(failed)


async def stay_member(layer, group: str, channel: str, failed: str) -> None:
    """Joins `group`, and again every REJOIN_SECONDS, for as long as it runs: a Redis restarted
    empty forgets its members, and only one receive of a process waits on Redis for all of its
    channels (channels_redis), so the other listeners never fail to tell of it."""
    async def joined_then_waited():
        await layer.group_add(group, channel)
        await asyncio.sleep(REJOIN_SECONDS)
    while True:
        await until_it_works(joined_then_waited, failed)


async def until_it_works(work: Callable[[], Awaitable], failed: str) -> None:
    """`work()` once it returns; after each failure again, REJOIN_SECONDS later. `failed` is
    logged once an outage: a Redis down fails every time."""
    failing = False
    while True:
        try:
            return await work()
        except Exception:
            if not failing:
                logger.exception(failed)
            failing = True
        await asyncio.sleep(REJOIN_SECONDS)
