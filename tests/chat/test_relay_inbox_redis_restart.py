"""A relay's inbox on a real Redis that restarted: the layer's connections from before the
restart fail once each, as they are next used, and the Stop must still reach the relay at once.

Found by the crowds probe (2026-12-07): three minutes after a Redis restart, a crowd's answers
began and each stale connection their stop listeners took failed `group_add` ("Connection
lost"); those listeners gave up for the answer's life, so their Stops waited for the relay's
heartbeat (10 s by default), and readers announcing themselves were never heard.
"""

import asyncio

import pytest

from chatapp.streaming import live_channel
from chatapp.streaming.relay_inbox import RelayInbox, tell_relay_to_stop
from reliability.redis_server import RedisServer
from tests.chat.redis_restart import joined, restarted_under_pooled_connections

pytestmark = pytest.mark.process  # a redis-server of the test's own, restarted

GENERATION_ID = 5150


async def test_a_stop_reaches_a_relay_whose_listener_began_on_connections_from_before_a_redis_restart(
        restartable_redis, settings):
    settings.CHAT_RELAY_HEARTBEAT_SECONDS = 3600  # only the channel can tell it
    await restarted_under_pooled_connections(restartable_redis, 4)

    stopped = asyncio.Event()
    tasks = RelayInbox(GENERATION_ID, on_stop=stopped.set, on_reader=lambda message: None,
                       first_delta_sent=asyncio.Event()).listen(at_once=False)
    try:
        await _stop_told_until_heard(GENERATION_ID, stopped)
    finally:
        await _cancelled(tasks)


async def test_a_stop_reaches_each_relay_that_was_listening_when_redis_restarted(restartable_redis, settings):
    # Three in one process: only one of their receives waits on Redis for all of them
    # (channels_redis), so only that one fails at the restart; the others' members are gone too.
    settings.CHAT_RELAY_HEARTBEAT_SECONDS = 3600
    generation_ids = (GENERATION_ID, GENERATION_ID + 1, GENERATION_ID + 2)
    stopped = {generation_id: asyncio.Event() for generation_id in generation_ids}
    tasks = [task for generation_id in generation_ids for task in RelayInbox(
        generation_id, on_stop=stopped[generation_id].set, on_reader=lambda message: None,
        first_delta_sent=asyncio.Event()).listen(at_once=False)]
    for generation_id in generation_ids:
        await _joined(restartable_redis, generation_id)

    restartable_redis.stop()
    restartable_redis.start()  # empty: the groups' members are gone with it

    try:
        for generation_id in generation_ids:
            await _stop_told_until_heard(generation_id, stopped[generation_id])
    finally:
        await _cancelled(tasks)


async def test_a_stop_told_once_on_connections_from_before_a_redis_restart_reaches_the_relay(
        restartable_redis, settings):
    """The Stop endpoint tells the relay once: a stale connection must not lose it to the
    relay's heartbeat (found on the stack: 5 to 6 s and some 1,100 more characters)."""
    settings.CHAT_RELAY_HEARTBEAT_SECONDS = 3600
    await restarted_under_pooled_connections(restartable_redis, 8)
    stopped = asyncio.Event()
    tasks = RelayInbox(GENERATION_ID, on_stop=stopped.set, on_reader=lambda message: None,
                       first_delta_sent=asyncio.Event()).listen(at_once=False)
    try:
        await _joined(restartable_redis)

        tell_relay_to_stop(GENERATION_ID)

        await asyncio.wait_for(stopped.wait(), 10)
    finally:
        await _cancelled(tasks)


async def test_a_stop_told_once_just_after_a_redis_restart_reaches_the_relay_without_its_heartbeat(
        restartable_redis, settings):
    """Told before the relay's listener joined its group again (it does every REJOIN_SECONDS), a
    Stop reached nobody, and waited for the relay's heartbeat (10 s by default)."""
    settings.CHAT_RELAY_HEARTBEAT_SECONDS = 3600
    stopped = asyncio.Event()
    tasks = RelayInbox(GENERATION_ID, on_stop=stopped.set, on_reader=lambda message: None,
                       first_delta_sent=asyncio.Event()).listen(at_once=False)
    try:
        await _joined(restartable_redis)
        restartable_redis.stop()
        restartable_redis.start()  # empty: the listener's member is gone until it joins again

        tell_relay_to_stop(GENERATION_ID)

        await asyncio.wait_for(stopped.wait(), 10)
    finally:
        await _cancelled(tasks)


async def _joined(server: RedisServer, generation_id: int = GENERATION_ID) -> None:
    """Waits until the relay's listener is a member of its group."""
    await joined(server, live_channel.relay_group(generation_id))


async def _stop_told_until_heard(generation_id: int, stopped: asyncio.Event) -> None:
    # Told until heard: a Stop sent before the listener joined its group reaches nobody.
    for _ in range(50):
        await _told_quietly(live_channel.tell_relay(generation_id, {"type": live_channel.STOP}))
        try:
            await asyncio.wait_for(stopped.wait(), 0.2)
            return
        except TimeoutError:
            pass
    raise AssertionError(f"the Stop never reached the listener of generation {generation_id}")


async def _cancelled(tasks: list[asyncio.Task]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.wait(tasks, timeout=10)


async def _told_quietly(telling) -> None:
    """A Stop's own send may meet a stale connection too; the page sends it again."""
    try:
        await telling
    except Exception:
        pass
