"""Fault injection: channel layers that fail as a Redis connection does.

Redis cannot be made to fail or time out on demand inside a test; these layers can.
"""

import asyncio

import redis.exceptions
from channels.layers import InMemoryChannelLayer


class FailingChannelLayer(InMemoryChannelLayer):
    """Lost its connection: every receive and every group send fails."""

    async def receive(self, channel):
        raise ConnectionError("injected: the channel layer lost its connection")

    async def group_send(self, group, message):
        raise ConnectionError("injected: the channel layer lost its connection")


class TimingOutChannelLayer(InMemoryChannelLayer):
    """Each receive first times out as redis-py does when a read outlasts its socket timeout
    (redis.exceptions.TimeoutError, not Python's own), then works."""

    async def receive(self, channel):
        self.timeouts = getattr(self, "timeouts", 0) + 1
        if self.timeouts % 2:
            raise redis.exceptions.TimeoutError("injected: Timeout reading from socket")
        return await super().receive(channel)


class StallingChannelLayer(InMemoryChannelLayer):
    """Leaving a group never returns, as with a Redis that took the connection and answers
    nothing; `joined` is set once a member has joined a group."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.joined = asyncio.Event()

    async def group_add(self, group, channel):
        await super().group_add(group, channel)
        self.joined.set()

    async def group_discard(self, group, channel):
        await asyncio.Event().wait()


class CancellationAsTimeoutChannelLayer(StallingChannelLayer):
    """A receive that, cancelled, raises a timeout instead, as an inner `asyncio.timeout` does
    when it takes the task's cancellation for its own expiry: a test loop's close once found a
    cancelled relay's stop listener back in Redis's BZPOPMIN (make test, 2026-12-06)."""

    async def receive(self, channel):
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise TimeoutError("injected: a cancellation taken for a timeout") from None


class SilentChannelLayer(InMemoryChannelLayer):
    """Answers nothing, as a Redis paused with its connections open: no send, join or receive
    ever returns."""

    async def send(self, channel, message):
        await asyncio.Event().wait()

    async def group_send(self, group, message):
        await asyncio.Event().wait()

    async def group_add(self, group, channel):
        await asyncio.Event().wait()

    async def receive(self, channel):
        await asyncio.Event().wait()
