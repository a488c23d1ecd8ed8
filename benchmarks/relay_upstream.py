"""A fast stand-in for the inference service, so the relay benchmark measures the relay itself.

`python -m benchmarks.relay_upstream --port P --interval-ms 20 --first-token-ms 30` serves the
OpenAI streaming protocol on plain asyncio streams, with no web framework: POST
/v1/chat/completions answers `max_tokens` content chunks, one token each, the first after
`first-token-ms` (a small model's prefill) and token i at i x interval after it, on a fixed
schedule so a late wake-up does not push the following tokens back; then the finish chunk, a
usage chunk and [DONE]. Every token is TOKEN_WIDTH characters (token i is its number,
zero-padded, and a space), so a client counts tokens from characters however a relay merges
them into events, and checks the text exactly. The events are encoded once and reused, so each
chunk costs one write. GET /health answers ok.
"""

import argparse
import asyncio
import functools
import json
import resource
import signal
import sys

_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
         b"transfer-encoding: chunked\r\n\r\n")
_END_OF_BODY = b"0\r\n\r\n"


TOKEN_WIDTH = 5


def token_text(index: int) -> str:
    return f"{index % 10_000:04d} "


def answer_text(tokens: int) -> str:
    """The whole text of an answer of `tokens` tokens."""
    return "".join(token_text(i) for i in range(tokens))


def _frame(payload) -> bytes:
    """One SSE event as one HTTP/1.1 chunk."""
    text = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    data = f"data: {text}\n\n".encode()
    return b"%x\r\n%s\r\n" % (len(data), data)


def _choice(delta: dict, finish: str | None = None) -> dict:
    return {"id": "bench", "object": "chat.completion.chunk", "created": 0, "model": "stand-in",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


_ROLE = _frame(_choice({"role": "assistant"}))


@functools.lru_cache(maxsize=64)
def _answer(count: int) -> tuple[list[bytes], bytes]:
    """The content frames of an answer of `count` chunks, and everything after the last one."""
    frames = [_frame(_choice({"content": token_text(i)})) for i in range(count)]
    tail = (_frame(_choice({}, "stop"))
            + _frame({"id": "bench", "object": "chat.completion.chunk", "created": 0,
                      "model": "stand-in", "choices": [],
                      "usage": {"prompt_tokens": 8, "completion_tokens": count,
                                "total_tokens": 8 + count}})
            + _frame("[DONE]") + _END_OF_BODY)
    return frames, tail


class StandIn:
    def __init__(self, interval_s: float, first_token_s: float, default_chunks: int):
        self.interval_s, self.first_token_s = interval_s, first_token_s
        self.default_chunks = default_chunks

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._one_request(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client hung up, perhaps mid-answer: that is how a relay stops a stream
        finally:
            writer.close()

    async def _one_request(self, reader, writer) -> bool:
        """Serves one request; False when the connection is to be closed."""
        request_line = await reader.readline()
        if not request_line:
            return False
        method, path, _ = request_line.decode("latin-1").split(" ", 2)
        length, keep_alive = 0, True
        while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            name, value = name.strip().lower(), value.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "connection" and value == "close":
                keep_alive = False
        body = await reader.readexactly(length) if length else b""
        if method == "POST" and path.startswith("/v1/chat/completions"):
            await self._stream(writer, body)
        elif method == "GET" and path.startswith("/health"):
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                         b"content-length: 15\r\n\r\n{\"status\":\"ok\"}")
            await writer.drain()
        else:
            writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
            await writer.drain()
        return keep_alive

    async def _stream(self, writer: asyncio.StreamWriter, body: bytes) -> None:
        try:
            count = int(json.loads(body or b"{}").get("max_tokens") or self.default_chunks)
        except (ValueError, AttributeError):
            count = self.default_chunks
        frames, tail = _answer(max(count, 1))
        loop = asyncio.get_running_loop()
        writer.write(_HEAD + _ROLE)
        await writer.drain()
        started = loop.time() + self.first_token_s
        for index in range(len(frames)):
            delay = started + index * self.interval_s - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            writer.write(frames[index])
            await writer.drain()
        writer.write(tail)
        await writer.drain()


def raise_open_files_limit(wanted: int = 65536) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


async def serve(host: str, port: int, interval_s: float, first_token_s: float,
                default_chunks: int) -> None:
    stand_in = StandIn(interval_s, first_token_s, default_chunks)
    server = await asyncio.start_server(stand_in.handle, host, port, backlog=4096)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    print(f"stand-in upstream on http://{host}:{port}", flush=True)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.relay_upstream",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--interval-ms", type=float, default=20.0,
                        help="time between two content chunks of one answer")
    parser.add_argument("--first-token-ms", type=float, default=0.0,
                        help="time from the request to the first content chunk (the prefill)")
    parser.add_argument("--default-chunks", type=int, default=50,
                        help="content chunks when the request names no max_tokens")
    args = parser.parse_args(argv)
    raise_open_files_limit()
    asyncio.run(serve(args.host, args.port, args.interval_ms / 1000, args.first_token_ms / 1000,
                      args.default_chunks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
