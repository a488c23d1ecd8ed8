"""What reaches a running answer from outside its stream: a Stop from any process and the
readers of its live channel announcing themselves (both over the channel layer, on the relay's
inbox group), and what its row says (an early Stop, an end decided elsewhere), read by the
relay's own heartbeat. The relay is told through two callbacks; nothing here touches its text.
"""

import asyncio
import logging
import time
from collections.abc import Callable

from channels.layers import get_channel_layer
from django.conf import settings
# redis-py's read timeout is its own class, not Python's TimeoutError.
from redis.exceptions import TimeoutError as RedisTimeoutError

from .. import selectors, services
from ..runtime.database_outage import log_failure
from ..runtime.database_threads import on_database_thread
from ..runtime.held_tasks import held_until_done
from . import live_channel

logger = logging.getLogger(__name__)

# A listener joins its group again every REJOIN_SECONDS, after a join that may itself take this
# long on a Redis just back: the second tell of a Stop waits for both.
_REJOIN_MARGIN_SECONDS = 0.5


def tell_relay_to_stop(generation_id: int) -> None:
    """After a Stop is recorded: the stream may be held by another daphne process, so tell
    them all at once, in a task of its own. The Stop's answer waits on nothing: a Redis that
    answers nothing held it for the layer's bound (5 s). The row holds the Stop, and the relay's
    next heartbeat reads it; the tells only bring it sooner (_tell_relay_to_stop)."""
    held_until_done(_tell_relay_to_stop(generation_id))


async def _tell_relay_to_stop(generation_id: int) -> None:
    """Told at once, and once more a rejoin interval after the first tell that went out: a Redis
    restarted just before forgot the relay's member of its group, which joins again within that
    interval (a tell meanwhile reached nobody), and a relay told already has left it, so the
    second reaches nobody. A tell that fails (Redis down) is tried again every rejoin interval,
    for a heartbeat at most: by then the relay has read the row."""
    give_up_at = time.monotonic() + settings.CHAT_RELAY_HEARTBEAT_SECONDS
    told, failing = 0, False
    while told < 2 and time.monotonic() < give_up_at:
        try:
            await live_channel.tell_relay(generation_id, {"type": live_channel.STOP})
            told += 1
        except Exception:
            if not failing:
                logger.exception("telling the relay of generation %s to stop failed; it is told again, "
                                 "and its heartbeat reads the row", generation_id)
            failing = True
        if told < 2:
            await asyncio.sleep(live_channel.REJOIN_SECONDS + _REJOIN_MARGIN_SECONDS)


class RelayInbox:
    def __init__(self, generation_id: int, *, on_stop: Callable[[], None],
                 on_reader: Callable[[dict], None], first_delta_sent: asyncio.Event):
        self.generation_id = generation_id
        self._on_stop, self._on_reader = on_stop, on_reader
        self._first_delta_sent = first_delta_sent

    def listen(self, at_once: bool) -> list[asyncio.Task]:
        """The listening tasks, for as long as the relay reads its upstream (it cancels them).
        `at_once`: the row's early Stop is read now, not after the first delta."""
        return [asyncio.create_task(work) for work in (
            self._listen_for_stop(), self._read_early_stop(at_once), self._keep_alive())]

    async def _listen_for_stop(self) -> None:
        """A Stop may come from any process: it arrives over the channel layer.

        Only a stop message asks the relay to stop. A quiet channel is no Stop: the layer's
        receive may time out and is simply asked again. A failing layer is no Stop either, and
        ends neither the listening nor the membership: both go on every
        live_channel.REJOIN_SECONDS (a Redis restarted forgets its groups, and its connections
        from before fail once each as they are next used); meanwhile the row is the record, and
        the heartbeat reads it (_keep_alive).
        """
        await self._channel_says_stop()
        self._on_stop()

    async def _channel_says_stop(self) -> None:
        """Also hears the readers of the live channel, which announce themselves here."""
        layer = get_channel_layer()
        channel = await layer.new_channel()
        group = live_channel.relay_group(self.generation_id)
        membership = asyncio.create_task(
            live_channel.stay_member(layer, group, channel, self._failed("membership")))
        try:
            await live_channel.until_it_works(lambda: self._heard_until_stop(layer, channel),
                                              self._failed("listener"))
        finally:  # also when cancelled while joining: a member left behind lingers for a day
            membership.cancel()
            # In a task of its own, not awaited: the listener's end, a cancellation most often,
            # never waits on the layer. A closing event loop (a server's at shutdown, a test's)
            # cancels the listener once more and waits for it; a leaving awaited there once held
            # such a close for 300 s, stuck in redis-py's connect past its bound.
            held_until_done(self._leave(layer, group, channel))

    def _failed(self, what: str) -> str:
        return (f"the stop {what} of generation {self.generation_id} failed; it tries again, and "
                "the heartbeat reads the row meanwhile")

    async def _heard_until_stop(self, layer, channel: str) -> None:
        """Returns at a Stop."""
        while True:
            try:
                message = await layer.receive(channel)
            except (TimeoutError, RedisTimeoutError):
                # Nothing came within the layer's wait: not a Stop. Unless this task was
                # cancelled meanwhile, and a timeout inside the layer took the cancellation
                # for its own: a test loop's close once found a cancelled listener back here.
                if asyncio.current_task().cancelling():
                    raise asyncio.CancelledError from None
                continue
            if message.get("type") == live_channel.STOP:
                return
            if message.get("type") == live_channel.READER:
                self._on_reader(message)

    async def _leave(self, layer, group: str, channel: str) -> None:
        """Leaves the group, or gives up after live_channel.LAYER_WITHIN_SECONDS (logged)."""
        try:
            await live_channel.leave(layer, group, channel)
        except Exception:
            logger.exception("the stop listener of generation %s did not leave its group",
                             self.generation_id)

    async def _read_early_stop(self, at_once: bool) -> None:
        """A Stop that came before we listened was sent to nobody; its row remembers it. The
        row is read once the first delta is out, so that the read does not delay it, or
        `at_once` when the page has just left (a Stop's page records it, then closes)."""
        if not at_once:
            await self._first_delta_sent.wait()
        try:
            if await on_database_thread(selectors.stop_requested)(generation_id=self.generation_id):
                self._on_stop()
        except Exception:  # the heartbeat reads the row again within a beat
            logger.exception("reading the early Stop of generation %s failed", self.generation_id)

    async def _keep_alive(self) -> None:
        """Proves the relay alive on its own timer, so a slow answer is never reaped as dead.

        The same write tells whether the row still says `streaming`: a Stop recorded there (its
        channel message lost, say) or an end decided elsewhere stops the stream within a beat.
        """
        heartbeat = on_database_thread(services.generation_heartbeat)
        while True:
            await asyncio.sleep(settings.CHAT_RELAY_HEARTBEAT_SECONDS)
            try:
                streaming = await heartbeat(generation_id=self.generation_id)
            except Exception:  # a missed beat is not fatal; the reaper allows for several
                log_failure(logger, "the heartbeat of generation %s failed", self.generation_id)
                continue
            if not streaming:
                self._on_stop()
                return
