"""A lean HTTP/1.1 client for the relay benchmark's streams: one keep-alive connection each.

httpx2 is the project's client, and the benchmark uses it for everything else (sign-in, new
conversations), but at 500 streams 20 ms apart httpx could not be the load generator: its
pool scanned every connection for every queued request, and reading one chunk cost it some
35 µs, so on two shared cores the direct baseline measured httpx, not the upstream (bursts of
chunks read together, a p50 gap of 0 ms). This client is an `asyncio.Protocol`: a request is
one write of prepared bytes, and each network read is timed once and parsed in place
(status line, headers, chunked or sized body); the body goes to a callback with the time it
arrived. Nothing more of HTTP than the stand-in and daphne need.
"""

import asyncio
import time
from collections.abc import Callable

OnBody = Callable[[bytes, float], None]


class HTTPError(Exception):
    pass


class _Protocol(asyncio.Protocol):
    def __init__(self):
        self.transport: asyncio.Transport | None = None
        self.closed = asyncio.get_running_loop().create_future()
        self._reset(None, None)

    def _reset(self, on_body: OnBody | None, done: asyncio.Future | None) -> None:
        self._on_body, self._done = on_body, done
        self._buffer = b""
        self._head = True
        self._chunked = False
        self._remaining: int | None = None  # body bytes still to come (sized body)
        self.status = 0
        self.keep_alive = True

    def start(self, request: bytes, on_body: OnBody) -> asyncio.Future:
        done = asyncio.get_running_loop().create_future()
        self._reset(on_body, done)
        self.transport.write(request)
        return done

    # --- asyncio ---
    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc) -> None:
        if not self.closed.done():
            self.closed.set_result(None)
        if self._done is not None and not self._done.done():
            if self._remaining is None and not self._chunked and not self._head:
                self._finish()  # a body delimited by the end of the connection
            else:
                self._done.set_exception(HTTPError(f"connection lost mid-response ({exc!r})"))

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        if self._done is None or self._done.done():
            return  # nothing asked: a stray byte after a response
        self._buffer += data
        try:
            self._parse(now)
        except (ValueError, HTTPError) as error:
            self._done.set_exception(HTTPError(f"bad response: {error}"))
            self.transport.close()

    # --- parsing ---
    def _parse(self, now: float) -> None:
        if self._head:
            end = self._buffer.find(b"\r\n\r\n")
            if end == -1:
                return
            head, self._buffer = self._buffer[:end].decode("latin-1"), self._buffer[end + 4:]
            status_line, *header_lines = head.split("\r\n")
            self.status = int(status_line.split(" ", 2)[1])
            for line in header_lines:
                name, _, value = line.partition(":")
                name, value = name.strip().lower(), value.strip().lower()
                if name == "transfer-encoding" and "chunked" in value:
                    self._chunked = True
                elif name == "content-length":
                    self._remaining = int(value)
                elif name == "connection" and value == "close":
                    self.keep_alive = False
            self._head = False
        if self._chunked:
            self._parse_chunks(now)
        elif self._remaining is not None:
            body, self._buffer = self._buffer[:self._remaining], self._buffer[self._remaining:]
            self._remaining -= len(body)
            if body:
                self._on_body(body, now)
            if self._remaining == 0:
                self._finish()
        elif self._buffer:
            body, self._buffer = self._buffer, b""
            self._on_body(body, now)

    def _parse_chunks(self, now: float) -> None:
        while True:
            line_end = self._buffer.find(b"\r\n")
            if line_end == -1:
                return
            size = int(self._buffer[:line_end].split(b";", 1)[0], 16)
            if size == 0:
                if self._buffer.find(b"\r\n\r\n", line_end) == -1:
                    return  # the (empty) trailer is still on its way
                self._buffer = b""
                self._finish()
                return
            start = line_end + 2
            if len(self._buffer) < start + size + 2:
                return
            self._on_body(self._buffer[start:start + size], now)
            self._buffer = self._buffer[start + size + 2:]

    def _finish(self) -> None:
        if not self._done.done():
            self._done.set_result(self.status)


class Connection:
    """One keep-alive connection; reopened when the server closed it."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self._protocol: _Protocol | None = None

    @property
    def is_open(self) -> bool:
        return self._protocol is not None and not self._protocol.closed.done()

    async def open(self) -> None:
        if not self.is_open:
            _, self._protocol = await asyncio.get_running_loop().create_connection(
                _Protocol, self.host, self.port)

    async def request(self, method: str, path: str, body: bytes, on_body: OnBody,
                      headers: dict[str, str] | None = None) -> int:
        """Sends one request; `on_body(bytes, arrival)` gets the body as it comes. Returns the
        status once the response has ended."""
        await self.open()
        head = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}",
                "Content-Type: application/json", f"Content-Length: {len(body)}"]
        head += [f"{name}: {value}" for name, value in (headers or {}).items()]
        request = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        protocol = self._protocol
        status = await protocol.start(request, on_body)
        if not protocol.keep_alive:
            self.close()
        return status

    def close(self) -> None:
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()
        self._protocol = None
