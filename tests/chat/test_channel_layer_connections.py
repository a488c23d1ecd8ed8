"""The channel layer's connections to Redis give up on a server gone silent (a host down, a
network cut, nothing sent back) within about half a minute, as chatapp/settings.py asks of TCP:
its defaults would wait two hours idle, or some fifteen minutes with a command unanswered."""

import socket

import pytest
from channels.layers import get_channel_layer
from django.conf import settings

pytestmark = pytest.mark.skipif(not settings.REDIS_URL, reason="the Redis channel layer's connections")


def tcp_option(sock: socket.socket, name: str) -> int:
    return sock.getsockopt(socket.IPPROTO_TCP, getattr(socket, name))


async def test_a_layer_connection_gives_up_on_a_silent_redis_within_half_a_minute():
    layer = get_channel_layer()
    await layer.send("silence-probe", {"type": "probe"})  # opens a connection, handed back to its pool
    [connection] = layer.connection(layer.consistent_hash("silence-probe")).connection_pool._available_connections
    sock = connection._writer.get_extra_info("socket")

    idle_s = tcp_option(sock, "TCP_KEEPIDLE") + tcp_option(sock, "TCP_KEEPINTVL") * tcp_option(sock, "TCP_KEEPCNT")
    assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
    assert idle_s <= 30
    assert 0 < tcp_option(sock, "TCP_USER_TIMEOUT") <= 30_000  # ms of a command unacknowledged
