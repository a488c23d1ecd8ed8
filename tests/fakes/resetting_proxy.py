"""Fault injection: a TCP proxy that resets the event streams it carries, or every connection.

A Wi-Fi drop or a NAT that forgets a connection ends an answer's stream with a reset (RST) the
browser sees as a network error mid-read; a network that is down for a while refuses every new
connection too. This proxy (the stalling proxy, which it extends) does both on demand: `reset()`
sends RST to the browser's side of every open event stream and closes nginx's side, and
`cut()` ... `restore()` resets everything open and every connection made meanwhile.
"""

import asyncio
import socket
import struct
from collections.abc import Iterator
from contextlib import contextmanager

from tests.fakes.stalling_proxy import StallingProxy, _Connection, serving


def _reset(connection: _Connection) -> None:
    """RST to the browser (a zero linger, then abort), and nginx's side closed."""
    sock = connection.client_writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    connection.client_writer.transport.abort()
    if connection.server_writer is not None:
        connection.server_writer.transport.abort()


class ResettingProxy(StallingProxy):
    def __init__(self, target_url: str):
        super().__init__(target_url)
        self.is_cut = False

    def reset(self) -> int:
        """Resets every open event stream; returns how many (called from any thread)."""
        return self._on_loop(lambda: [_reset(c) for c in self._connections if c.is_event_stream])

    def cut(self) -> None:
        """The network is down: everything open is reset, and so is every new connection."""
        self.is_cut = True
        self._on_loop(lambda: [_reset(c) for c in self._connections])

    def restore(self) -> None:
        self.is_cut = False

    def _on_loop(self, work) -> int:
        async def run():
            return len(work())
        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    async def _serve(self, client_reader, client_writer) -> None:
        if self.is_cut:
            _reset(_Connection(client_writer))
            return
        await super()._serve(client_reader, client_writer)


@contextmanager
def resetting_proxy(target_url: str) -> Iterator[ResettingProxy]:
    """A ResettingProxy in front of `target_url`, served from a thread; its `url` is its own."""
    with serving(ResettingProxy(target_url)) as proxy:
        yield proxy
