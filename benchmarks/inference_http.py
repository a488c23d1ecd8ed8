"""The inference service's HTTP layer alone: the real app under uvicorn in its own process, the
model replaced by a stand-in engine (benchmarks/stand_in_engine.py) that gives each of 64
streams one token every 2 ms, 32,000 tokens/s offered.

Target: delivered tokens/s >= 90% of offered, every stream's text complete and exact, and the
first token of each stream sent alone. Delivered tokens/s is the sum of every stream's pace,
its tokens over the span from its first token received to its last: a server that falls
behind the stand-in stretches those spans, while streams opened a little apart cost nothing.
`events_per_token` says how much the writer coalesced (1.0: none).

`measure(...)` returns the figures as a dict; `python -m benchmarks.inference_http` prints them.
"""

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx2

from common.sse import SSEParser
from harness.child_process import ChildProcess
from harness.ports import free_port

from .sse_client import new_client
from .stand_in_engine import MODEL_NAME, answer_text, token_text

TARGET_RATIO = 0.9


@dataclass
class _Stream:
    label: str
    parts: list[str] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)  # one per content event
    done: bool = False
    error: str | None = None

    @property
    def text(self) -> str:
        return "".join(self.parts)


def measure(streams: int = 64, step_ms: float = 2.0, tokens_per_stream: int | None = None,
            seconds: float = 5.0) -> dict:
    """Runs the stand-in service, streams `streams` answers at once from it, and returns:

    offered_tokens_per_s, delivered_tokens_per_s, ratio (delivered / offered), exact_streams
    (text complete and exact, [DONE] received), first_token_alone (streams whose first content
    event held exactly their first token), events_per_token, server_cpu_us_per_token and
    client_cpu_us_per_token (the server's process and this one's), and the
    run's shape (streams, step_ms, tokens_per_stream, target_met). Each stream's answer is
    `tokens_per_stream` tokens, by default `seconds` of steps.
    """
    tokens = tokens_per_stream or round(seconds * 1000 / step_ms)
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    server = ChildProcess("stand-in-inference",
                          [sys.executable, "-m", "benchmarks.stand_in_engine", "--port", str(port),
                           "--step-ms", str(step_ms)], None, f"{base_url}/health")
    server.start()
    try:
        server_before, client_before = _cpu_seconds(server.pid), time.process_time()
        results = asyncio.run(_stream_all(base_url, streams, tokens))
        cpu_s = (_cpu_seconds(server.pid) - server_before, time.process_time() - client_before)
    finally:
        server.close()
    return _figures(results, streams, step_ms, tokens, cpu_s)


async def _stream_all(base_url: str, streams: int, tokens: int) -> list[_Stream]:
    results = [_Stream(f"s{i}") for i in range(streams)]
    async with new_client(streams, timeout_s=120.0) as client:
        await asyncio.gather(*(_stream_one(client, base_url, result, tokens) for result in results))
    return results


async def _stream_one(client: httpx2.AsyncClient, base_url: str, result: _Stream, tokens: int) -> None:
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": result.label}],
            "stream": True, "max_tokens": tokens}
    parser = SSEParser()
    try:
        async with client.stream("POST", f"{base_url}/v1/chat/completions", json=body) as response:
            if response.status_code != 200:
                result.error = f"HTTP {response.status_code}"
                return
            async for chunk in response.aiter_bytes():
                now = time.perf_counter()
                for event in parser.feed(chunk):
                    _apply(result, event.data, now)
    except httpx2.HTTPError as error:
        result.error = f"{type(error).__name__}: {error}"


def _apply(result: _Stream, data: str, now: float) -> None:
    if data == "[DONE]":
        result.done = True
        return
    event = json.loads(data)
    if "error" in event:
        result.error = event["error"]["message"]
    for choice in event.get("choices") or []:
        content = choice["delta"].get("content")
        if content:
            result.parts.append(content)
            result.arrivals.append(now)


def _figures(results: list[_Stream], streams: int, step_ms: float, tokens: int,
             cpu_s: tuple[float, float]) -> dict:
    delivered = sum(result.text.count(" ") for result in results)  # each token ends in a space
    offered = streams * 1000 / step_ms
    rate = sum(_tokens_per_s(result) for result in results)
    ratio = rate / offered
    exact = sum(r.done and r.error is None and r.text == answer_text(r.label, tokens) for r in results)
    alone = sum(bool(r.parts) and r.parts[0] == token_text(r.label, 0) for r in results)
    return {
        "streams": streams, "step_ms": step_ms, "tokens_per_stream": tokens,
        "offered_tokens_per_s": offered, "delivered_tokens_per_s": rate,
        "ratio": ratio, "exact_streams": exact, "first_token_alone": alone,
        "events_per_token": sum(len(r.arrivals) for r in results) / delivered if delivered else float("nan"),
        "server_cpu_us_per_token": cpu_s[0] / delivered * 1e6 if delivered else float("nan"),
        "client_cpu_us_per_token": cpu_s[1] / delivered * 1e6 if delivered else float("nan"),
        "errors": sorted({r.error for r in results if r.error}),
        "target_met": ratio >= TARGET_RATIO and exact == streams and alone == streams,
    }


def _tokens_per_s(result: _Stream) -> float:
    """One stream's pace, its first token to its last: the stand-in offers one a step."""
    tokens = result.text.count(" ")
    if tokens < 2:
        return 0.0
    return (tokens - 1) / (result.arrivals[-1] - result.arrivals[0])


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--step-ms", type=float, default=2.0)
    parser.add_argument("--seconds", type=float, default=5.0, help="each answer's length in steps' time")


def run(args: argparse.Namespace) -> int:
    figures = measure(args.streams, args.step_ms, seconds=args.seconds)
    print(f"inference HTTP layer, {figures['streams']} streams x {figures['tokens_per_stream']} "
          f"tokens, a step every {figures['step_ms']:g} ms")
    for name, value in figures.items():
        print(f"  {name}: {value:.3f}" if isinstance(value, float) else f"  {name}: {value}")
    verdict = "PASS" if figures["target_met"] else "FAIL"
    print(f"target (delivered >= {TARGET_RATIO:.0%} of offered, every stream exact, every first "
          f"token alone): {verdict}")
    return 0 if figures["target_met"] else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m benchmarks.inference_http", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))
