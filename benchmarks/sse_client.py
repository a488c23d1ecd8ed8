"""A load generator that speaks the OpenAI chat-completions SSE protocol over httpx.

Events are parsed as the SSE specification says (fields per line, events ended by a blank
line, comments starting with ':' ignored, any of CRLF/LF/CR ending a line), not by splitting on
"data: ", so heartbeats, multi-line data and events cut across network reads are all handled.
"""

import asyncio
import json
import re
import time
from collections import deque
from collections.abc import Iterator

import httpx

from .latency import LevelResult, RequestRecord
from .workload import BenchRequest


_LINE_END = re.compile(r"\r\n|\r|\n")


class SSEParser:
    """Feed it text as it arrives; it yields the data of each complete event."""

    def __init__(self):
        self._buffer = ""
        self._data: list[str] = []

    def feed(self, text: str) -> Iterator[str]:
        self._buffer += text
        while True:
            line, ending = self._next_line()
            if ending is None:
                return
            if line == "":
                if self._data:
                    yield "\n".join(self._data)
                self._data = []
                continue
            if line.startswith(":"):
                continue  # a comment: the server's heartbeat
            name, _, value = line.partition(":")
            if value.startswith(" "):
                value = value[1:]
            if name == "data":
                self._data.append(value)
            # event, id and retry mean nothing to a chat completion stream

    def _next_line(self) -> tuple[str, str | None]:
        match = _LINE_END.search(self._buffer)
        # A CR at the very end may be the first half of a CRLF still in flight.
        if match is None or (match.group() == "\r" and match.end() == len(self._buffer)):
            return "", None
        line, self._buffer = self._buffer[:match.start()], self._buffer[match.end():]
        return line, match.group()


GREEDY = {"temperature": 0}


def chat_body(model: str, request: BenchRequest, sampling: dict = GREEDY) -> dict:
    return {
        "model": model,
        "messages": request.messages,
        "stream": True,
        "max_tokens": request.max_tokens,
        **sampling,
        "stream_options": {"include_usage": True},
    }


async def stream_chat(client: httpx.AsyncClient, url: str, model: str,
                      request: BenchRequest, record: RequestRecord | None = None,
                      sampling: dict = GREEDY) -> RequestRecord:
    """Streams one request into `record` as chunks arrive: a cancelled stream keeps its times."""
    if record is None:
        record = RequestRecord(request.index, request.max_tokens, request.num_prompt_tokens,
                               sent_at=0.0)
    record.sent_at = time.perf_counter()  # TTFT starts here, before the connection is made
    parser = SSEParser()
    try:
        response = await _send(client, client.build_request(
            "POST", url, json=chat_body(model, request, sampling)), record)
        try:
            if response.status_code != 200:
                body = (await response.aread()).decode(errors="replace")
                record.error = f"HTTP {response.status_code}: {body[:300]}"
                return record
            async for text in response.aiter_text():
                now = time.perf_counter()
                for data in parser.feed(text):
                    if data == "[DONE]":
                        record.finished_at = now
                        continue
                    _apply_event(record, json.loads(data), now)
        finally:
            await response.aclose()
        if record.finished_at is None and record.error is None:
            record.error = "the stream ended without [DONE]"
    except asyncio.CancelledError:
        record.cancelled = True
        raise
    except (httpx.HTTPError, json.JSONDecodeError) as error:
        record.error = f"{type(error).__name__}: {error}"
    return record


async def _send(client: httpx.AsyncClient, request: httpx.Request,
                record: RequestRecord) -> httpx.Response:
    """Sends again, once, on a fresh connection when the server closed a kept-alive one before
    answering: llama.cpp's server closes a connection idle for 5 s, and on a starved machine the
    client may take that long to send its next request. The time lost stays in the TTFT."""
    try:
        return await client.send(request, stream=True)
    except httpx.RemoteProtocolError:
        record.reconnects += 1
        return await client.send(request, stream=True)


def _apply_event(record: RequestRecord, event: dict, now: float) -> None:
    if "error" in event:
        record.error = str(event["error"].get("message", event["error"]))
        return
    for choice in event.get("choices") or []:
        content = (choice.get("delta") or {}).get("content")
        if content:
            record.arrivals.append(now)
            record.answer += content
        if choice.get("finish_reason"):
            record.finish_reason = choice["finish_reason"]
    usage = event.get("usage")
    if usage:
        record.completion_tokens = usage.get("completion_tokens", 0)
        record.reported_prompt_tokens = usage.get("prompt_tokens")
        record.cached_tokens = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")


def new_client(concurrency: int, timeout_s: float) -> httpx.AsyncClient:
    # Room for every stream plus the side requests (/metrics) made while they run.
    limits = httpx.Limits(max_connections=concurrency + 8,
                          max_keepalive_connections=concurrency + 8)
    return httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(timeout_s, connect=10.0))


async def run_closed_loop(base_url: str, model: str, requests: list[BenchRequest],
                          concurrency: int, system: str, timeout_s: float = 600.0) -> LevelResult:
    """Fixed concurrency: each of `concurrency` workers sends its next request when its last ends.

    New requests therefore keep arriving while others decode, which is what the ITL target is
    about; the level's wall time runs from the first send to the last completion.
    """
    pending = deque(requests)
    records: list[RequestRecord] = []
    url = f"{base_url}/v1/chat/completions"
    async with new_client(concurrency, timeout_s) as client:

        async def worker() -> None:
            while pending:
                records.append(await stream_chat(client, url, model, pending.popleft()))

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - started
    records.sort(key=lambda r: r.index)
    return LevelResult(system, concurrency, wall, records)
