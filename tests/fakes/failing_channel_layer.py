"""Fault injection: a channel layer whose receive always fails (a broken Redis connection, say).

Redis cannot be made to fail one listener's reads on demand; this layer can. Sending works,
so a Stop's message goes out and reaches nobody.
"""

from channels.layers import InMemoryChannelLayer


class FailingReceiveChannelLayer(InMemoryChannelLayer):
    async def receive(self, channel):
        raise ConnectionError("injected: the channel layer lost its connection")
