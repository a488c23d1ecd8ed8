"""A watch (or a resume) joins its answer's hub on a real Redis that restarted, or is down: the
hub's join must not fail the watch, whose text the hub can read from the rows; and a hub that
was listening when Redis restarted hears the relay's deltas live again, not from the rows.

Found by the crowds probe (2026-12-07): 1 of 20 watches of a completed answer, opened a second
after a Redis restart, ended in `error` server_error "the server failed while streaming" with
no `done`: the hub's `group_add` took a pooled connection from before the restart.
"""

import asyncio

import pytest
from channels.layers import get_channel_layer

from chatapp.streaming import live_channel, live_hub
from tests.chat.redis_restart import joined, restarted_under_pooled_connections, sent_until_heard
from tests.chat.test_live_hub import saved

pytestmark = pytest.mark.process  # a redis-server of the test's own, restarted

GENERATION_ID = 6160


async def test_hubs_joined_on_connections_from_before_a_redis_restart_are_joined(restartable_redis):
    await restarted_under_pooled_connections(restartable_redis, 8)

    failures = await asyncio.gather(*(_joining(GENERATION_ID + i) for i in range(8)), return_exceptions=True)

    assert [repr(failure) for failure in failures if failure is not None] == []


async def test_a_hub_joined_while_redis_is_down_still_serves_its_watchers(restartable_redis):
    restartable_redis.stop()

    assert await _joining(GENERATION_ID) is None


async def _joining(generation_id: int) -> None:
    async with live_hub.joined(generation_id) as hub:
        assert hub.generation_id == generation_id


async def test_a_hub_listening_when_redis_restarted_hears_the_relays_deltas_live_again(restartable_redis, settings):
    """Found in the last session's fault runs: the hub's receive failed once at the restart and
    was never asked again, and the restarted Redis had forgotten its member of the live group,
    so its watchers read the rows every watch interval for the rest of the answer."""
    settings.CHAT_WATCH_INTERVAL_SECONDS = 3600  # the rows play no part: only the channel can tell it
    async with live_hub.joined(GENERATION_ID) as hub:
        hub.heard_rows(saved("Hello"))
        await joined(restartable_redis, live_channel.live_group(GENERATION_ID))

        restartable_redis.stop()
        restartable_redis.start()  # empty: the group's member is gone with it

        await sent_until_heard(
            lambda: get_channel_layer().group_send(live_channel.live_group(GENERATION_ID), {
                "type": live_channel.DELTA, "offset": len("Hello"), "text": " world"}),
            lambda: hub.changed.wait(), "the relay's delta")

    assert hub.text.text == "Hello world"
