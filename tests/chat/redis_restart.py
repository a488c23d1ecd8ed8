"""The channel layer the settings configure, on a Redis server of the test's own that the test
restarts: the layer's pooled connections from before the restart fail once each, as they are
next used, and the restarted Redis has forgotten every group."""

import asyncio
from collections.abc import Awaitable, Callable

import pytest
import redis
from channels.layers import channel_layers, get_channel_layer

from reliability.redis_server import RedisServer


@pytest.fixture
def restartable_redis(settings):
    """The channel layer the settings configure, on a Redis server of the test's own."""
    layer = settings.CHANNEL_LAYERS["default"]
    if layer["BACKEND"] != "channels_redis.core.RedisChannelLayer":
        pytest.skip("the channel layer on Redis: REDIS_URL")
    with RedisServer() as server:
        host = {**layer["CONFIG"]["hosts"][0], "address": server.url}
        settings.CHANNEL_LAYERS = {"default": {**layer, "CONFIG": {**layer["CONFIG"], "hosts": [host]}}}
        channel_layers.backends.pop("default", None)  # built again from these settings
        try:
            yield server
        finally:
            channel_layers.backends.pop("default", None)


async def restarted_under_pooled_connections(server: RedisServer, connections: int) -> None:
    """`connections` connections in the layer's pool, as a serving process has them, then Redis
    restarted on the same port, empty."""
    layer = get_channel_layer()
    await asyncio.gather(*(layer.group_send(f"warm-{i}", {"type": "warm"}) for i in range(connections)))
    server.stop()
    server.start()


async def joined(server: RedisServer, group: str) -> None:
    """Waits until `group` has a member on `server` (a listener's or a hub's join is a task of its own)."""
    await joined_at(server.url, group)


async def joined_at(url: str, group: str) -> None:
    """Waits until `group` has a member on the Redis at `url`."""
    members = redis.Redis.from_url(url)
    for _ in range(200):
        if members.zcard(f"asgi:group:{group}"):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"nobody joined {group}")


async def sent_until_heard(send: Callable[[], Awaitable], heard: Callable[[], Awaitable], what: str,
                           wait_s: float = 0.2) -> None:
    """`send()` again until `heard()` completes within `wait_s`: one sent before the listener
    joined its group again reaches nobody, and a sender's own pooled connection from before the
    restart fails once."""
    for _ in range(50):
        try:
            await send()
        except redis.ConnectionError:
            pass
        try:
            await asyncio.wait_for(heard(), wait_s)
            return
        except TimeoutError:
            pass
    raise AssertionError(f"{what} was never heard after the restart")
