"""Fault injection: an SSE chat server that drops a kept-alive connection without answering.

llama.cpp's server closes a connection that stays idle for 5 s; a client that sends its next
request just then sees the connection close before any response. This server does that
deterministically: on every connection it answers the first request and closes on the second.
"""

import asyncio
import json

_EVENTS = [{"choices": [{"delta": {"content": "Hi"}, "finish_reason": None}]},
           {"choices": [{"delta": {}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1}}]
_BODY = "".join(f"data: {json.dumps(event)}\n\n" for event in _EVENTS) + "data: [DONE]\n\n"


class KeepaliveDropper:
    def __init__(self):
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        host, port = self.server.sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    async def stop(self) -> None:
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        await self._read_request(reader)
        body = _BODY.encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        await writer.drain()
        await self._read_request(reader)  # the second request on this connection: no answer
        writer.close()

    @staticmethod
    async def _read_request(reader: asyncio.StreamReader) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        await reader.readexactly(length)
