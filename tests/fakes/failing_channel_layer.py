"""Fault injection: a channel layer that has lost its connection (Redis gone, say).

Redis cannot be made to fail on demand inside a test; this layer fails every receive and every
group send.
"""

from channels.layers import InMemoryChannelLayer


class FailingChannelLayer(InMemoryChannelLayer):
    async def receive(self, channel):
        raise ConnectionError("injected: the channel layer lost its connection")

    async def group_send(self, group, message):
        raise ConnectionError("injected: the channel layer lost its connection")
