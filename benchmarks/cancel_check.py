"""The cancel check: do cancelled streams stop costing the survivors anything, and how soon?"""

import asyncio
import time

from common.percentiles import percentile

from .latency import RequestRecord
from .server_process import ServerProcess
from .sse_client import new_client, stream_chat
from .workload import BenchRequest

# Sampled, not greedy: greedy answers to these prompts end early and alike, which left no
# window after the cancel in which every survivor was still decoding.
CANCEL_SAMPLING = {"temperature": 0.8, "top_p": 0.95}


async def cancel_experiment(server: ServerProcess, requests: list[BenchRequest],
                            cancel_after_chunks: int, timeout_s: float = 600.0) -> dict:
    """All streams decode together; then every other one is cancelled mid-stream.

    The survivors' gaps before the cancel (all streams decoding, no prompt in flight) are
    compared with their gaps after it, from the moment the server reports the cancelled
    streams gone until a survivor ends, so the batch is the same throughout each window
    (`survivor_windows`). If a cancelled stream kept costing a step's work, the survivors could
    not get faster; the server's own gauge and counters say whether it dropped them, how soon,
    and whether it counted each cancelled or finished.
    """
    url = f"{server.base_url}/v1/chat/completions"
    model = server.model_name
    records = [RequestRecord(r.index, r.max_tokens, r.num_prompt_tokens, sent_at=0.0)
               for r in requests]
    async with new_client(len(requests), timeout_s) as client:
        before_metrics = await server.metrics(client)
        tasks = [asyncio.create_task(stream_chat(client, url, model, request, record,
                                                 CANCEL_SAMPLING | {"seed": request.index}))
                 for request, record in zip(requests, records)]
        deadline = time.perf_counter() + timeout_s
        while not all(t.done() or len(r.arrivals) >= cancel_after_chunks
                      for t, r in zip(tasks, records)):
            if time.perf_counter() > deadline:
                raise TimeoutError("the cancel experiment's streams did not get going")
            await asyncio.sleep(0.002)
        cancelled_at = time.perf_counter()
        victims = [i for i in range(0, len(tasks), 2) if not tasks[i].done()]
        for i in victims:
            tasks[i].cancel()
        await asyncio.gather(*(tasks[i] for i in victims), return_exceptions=True)
        survivors = [i for i in range(len(tasks)) if i not in victims]

        # Polled gently: each scrape takes the server's event loop away from the streams.
        dropped_at, running_after = None, None
        while time.perf_counter() - cancelled_at < 10.0:
            metrics = await server.metrics(client)
            running_after = metrics.get("inference_running_sequences")
            live = sum(1 for i in survivors if not tasks[i].done())
            if running_after is not None and running_after <= live:
                dropped_at = time.perf_counter()
                break
            await asyncio.sleep(0.05)
        await asyncio.gather(*(tasks[i] for i in survivors), return_exceptions=True)
        # Read once every stream has ended, so that no count of the server's is still to come.
        final_metrics = await server.metrics(client)

    steady_from = max(r.arrivals[0] for r in records if r.arrivals)
    surviving = [records[i] for i in survivors]
    before, after = survivor_windows(surviving, steady_from, cancelled_at, dropped_at)
    cancelled_count = _delta(before_metrics, final_metrics, "inference_requests_cancelled_total")
    # Every request the server ended itself, with any finish_reason: the survivors, and a
    # cancelled stream whose answer ran out before its cancel reached the server.
    finished_count = _delta(before_metrics, final_metrics, "inference_requests_total")
    return {
        "streams": len(requests),
        "cancelled": len(victims),
        "survivors_running_at_cancel": sum(1 for r in surviving
                                           if r.arrivals and r.arrivals[-1] > cancelled_at),
        "chunks_before_cancel": cancel_after_chunks,
        "itl_before_s": _window(before),
        "itl_after_s": _window(after),
        "server_running_after": running_after,
        "server_dropped_within_s": None if dropped_at is None else dropped_at - cancelled_at,
        "server_cancelled_counter_delta": cancelled_count,
        "server_finished_counter_delta": finished_count,
        "survivor_errors": [records[i].error for i in survivors if records[i].error],
    }


def survivor_windows(survivors: list[RequestRecord], steady_from: float, cancelled_at: float,
                     dropped_at: float | None) -> tuple[list[float], list[float]]:
    """The survivors' gaps before the cancel (from `steady_from`, when every stream had its first
    token) and after it, from the server's drop (the cancel where it never reported one).

    The window after holds one batch: it ends when a survivor decoding in it ends. Where one
    ends before each of the others has a gap in the window (an answer that ran out a step or
    two after the drop), the window starts again at that end, without it: the first stretch in
    which the same survivors decode, each at least once."""
    before = _gaps_within(survivors, steady_from, cancelled_at)
    start = cancelled_at if dropped_at is None else dropped_at
    while True:
        decoding = [r for r in survivors if r.arrivals and r.arrivals[-1] > start]
        if not decoding:
            return before, []
        end = min(r.arrivals[-1] for r in decoding)
        gaps = [_gaps_within([r], start, end) for r in decoding]
        if all(gaps):
            return before, [gap for own in gaps for gap in own]
        start = end


def _delta(before: dict[str, float], after: dict[str, float], name: str) -> float:
    return after.get(name, 0.0) - before.get(name, 0.0)


def _gaps_within(records: list[RequestRecord], start: float, end: float) -> list[float]:
    return [b - a for r in records for a, b in zip(r.arrivals, r.arrivals[1:])
            if a >= start and b <= end]


def _window(gaps: list[float]) -> dict:
    return {"p50": percentile(gaps, 50), "p90": percentile(gaps, 90), "n": len(gaps)}
