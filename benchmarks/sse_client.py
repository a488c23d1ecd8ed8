"""A load generator that speaks the OpenAI chat-completions SSE protocol over httpx2.

Events are read by the relay's own parser (chatapp/sse.py: heartbeats, multi-line data, events
and characters cut across network reads), not by splitting on "data: ".
"""

import asyncio
import json
import time
from collections import deque

import httpx2

from common.sse import SSEParser

from .latency import LevelResult, RequestRecord
from .workload import BenchRequest


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


async def stream_chat(client: httpx2.AsyncClient, url: str, model: str,
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
            async for chunk in response.aiter_bytes():
                now = time.perf_counter()
                for event in parser.feed(chunk):
                    if event.data == "[DONE]":
                        record.finished_at = now
                        continue
                    _apply_event(record, json.loads(event.data), now)
        finally:
            await response.aclose()
        if record.finished_at is None and record.error is None:
            record.error = "the stream ended without [DONE]"
    except asyncio.CancelledError:
        record.cancelled = True
        raise
    except (httpx2.HTTPError, json.JSONDecodeError) as error:
        record.error = f"{type(error).__name__}: {error}"
    return record


async def _send(client: httpx2.AsyncClient, request: httpx2.Request,
                record: RequestRecord) -> httpx2.Response:
    """Sends again, once, on a fresh connection when the server closed a kept-alive one before
    answering: llama.cpp's server closes a connection idle for 5 s, and on a starved machine the
    client may take that long to send its next request. The time lost stays in the TTFT."""
    try:
        return await client.send(request, stream=True)
    except httpx2.RemoteProtocolError:
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


def new_client(concurrency: int, timeout_s: float) -> httpx2.AsyncClient:
    # Room for every stream plus the side requests (/metrics) made while they run.
    limits = httpx2.Limits(max_connections=concurrency + 8,
                          max_keepalive_connections=concurrency + 8)
    return httpx2.AsyncClient(limits=limits, timeout=httpx2.Timeout(timeout_s, connect=10.0))


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
