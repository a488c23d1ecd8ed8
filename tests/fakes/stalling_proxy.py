"""Fault injection: a TCP proxy that, once told to, stops forwarding the streams it carries.

A connection can stall without closing: a proxy or a network path that goes silent leaves both
ends waiting, and only the client can notice that not even the server's `: ping` arrives. This
proxy sits in front of nginx and forwards both ways until `stall()`; from then on the bytes of
every event stream open at that moment are swallowed (nothing reaches the browser, nothing is
closed). Other connections, and new ones, keep flowing, so the page can still load and retry.
"""

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

from harness.waiting import wait_until

_EVENT_STREAM = b"text/event-stream"


class _Connection:
    def __init__(self, client_writer):
        self.is_event_stream = False  # the server answered it with an event stream
        self.is_stalled = False
        self.client_writer = client_writer
        self.server_writer = None


class StallingProxy:
    def __init__(self, target_url: str):
        target = urlsplit(target_url)
        self.target = (target.hostname, target.port)
        self.target_url = target_url  # the way around the proxy
        self.url = ""
        self._connections: list[_Connection] = []
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None

    def stall(self) -> int:
        """Stops forwarding what the servers of the open event streams send; returns how many."""
        streams = [c for c in self._connections if c.is_event_stream]
        for connection in streams:
            connection.is_stalled = True
        return len(streams)

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        host, port = self._server.sockets[0].getsockname()[:2]
        self.url = f"http://{host}:{port}"

    async def _serve(self, client_reader, client_writer) -> None:
        connection = _Connection(client_writer)
        self._connections.append(connection)
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.target)
        except OSError:
            client_writer.close()
            return
        connection.server_writer = server_writer
        await asyncio.gather(self._pipe(client_reader, server_writer, None),
                             self._pipe(server_reader, client_writer, connection))
        self._connections.remove(connection)

    @staticmethod
    async def _pipe(reader, writer, connection: _Connection | None) -> None:
        """Copies until either end closes; `connection` is given for the server's side."""
        try:
            while data := await reader.read(65536):
                if connection is not None:
                    connection.is_event_stream = connection.is_event_stream or _EVENT_STREAM in data
                    if connection.is_stalled:
                        continue  # swallowed: the browser waits for bytes that never come
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._start())
        self._loop.run_forever()

    def _shut(self) -> None:
        self._server.close()
        for task in asyncio.all_tasks(self._loop):
            task.cancel()
        self._loop.stop()


@contextmanager
def stalling_proxy(target_url: str) -> Iterator[StallingProxy]:
    """A StallingProxy in front of `target_url`, served from a thread; its `url` is its own."""
    with serving(StallingProxy(target_url)) as proxy:
        yield proxy


@contextmanager
def serving(proxy: StallingProxy) -> Iterator[StallingProxy]:
    """Runs `proxy` on a thread of its own until the block ends."""
    thread = threading.Thread(target=proxy._run, name="stalling-proxy", daemon=True)
    thread.start()
    try:
        wait_until(lambda: bool(proxy.url), 10, "the stalling proxy to listen")
        yield proxy
    finally:
        proxy._loop.call_soon_threadsafe(proxy._shut)
        thread.join(timeout=10)
