"""A client that goes away frees its sequence and its cache before the next step."""

import asyncio

import httpx2

from harness import waiting
from inference.async_engine import AsyncEngine
from inference.engine import SamplingParams

from tests.inference import models
from tests.inference.serving import chat, metric, serving, service_for

# Greedy: the tiny model's answer to chat()'s prompt never ends by itself within 1,000 tokens, so
# each request ends because its client left. Sampled, one could draw the end token after its
# client left and before the engine heard of it: finished, not cancelled (seen once in 50).
LEFT_BEFORE_ITS_END = dict(stream=True, max_tokens=1000, temperature=0)


async def test_a_stream_closed_after_k_outputs_is_freed_before_the_next_step():
    engine = models.engine(models.tiny_model())
    loop = asyncio.get_running_loop()
    freed = asyncio.Event()
    steps_at_abort: list[int] = []

    def on_cancel(request_id):  # runs on the step thread, at the top of a step
        steps_at_abort.append(engine.num_steps)
        loop.call_soon_threadsafe(freed.set)

    async_engine = AsyncEngine(engine, max_waiting=8, on_cancel=on_cancel)
    async_engine.start()
    try:
        stream = async_engine.open("leaver", [5, 6, 7, 8], SamplingParams(max_tokens=1000))
        for _ in range(3):
            await anext(stream)
        steps_at_close = engine.num_steps
        stream.close()
        await asyncio.wait_for(freed.wait(), timeout=30)
    finally:
        async_engine.stop()

    assert steps_at_abort[0] <= steps_at_close + 1
    assert engine.num_running == 0
    assert engine.kv_cache.num_reserved_tokens == 0
    assert engine.kv_cache.num_allocated_bytes == 0  # a stopped engine keeps no prefix either


async def test_a_client_that_leaves_after_its_answer_ended_but_before_reading_the_end_is_counted_cancelled():
    # The engine may finish an answer while its client is leaving: the end was never delivered,
    # so the request is neither completed for anyone nor may it go uncounted.
    engine = models.engine(models.tiny_model())
    loop = asyncio.get_running_loop()
    cancelled = asyncio.Event()
    cancelled_ids: list[str] = []

    def on_cancel(request_id):
        cancelled_ids.append(request_id)
        loop.call_soon_threadsafe(cancelled.set)

    async_engine = AsyncEngine(engine, max_waiting=8, on_cancel=on_cancel)
    async_engine.start()
    try:
        stream = async_engine.open("late-leaver", [5, 6, 7, 8], SamplingParams(max_tokens=3))
        await asyncio.to_thread(
            waiting.wait_until,
            lambda: async_engine.stats().num_prefilled_tokens > 0 and async_engine.stats().num_running == 0,
            30, "the engine to finish the answer nobody read")
        stream.close()
        await asyncio.wait_for(cancelled.wait(), timeout=30)
    finally:
        async_engine.stop()

    assert cancelled_ids == ["late-leaver"]


async def test_a_client_that_reads_its_answer_to_the_end_is_not_counted_cancelled():
    engine = models.engine(models.tiny_model())
    cancelled_ids: list[str] = []
    async_engine = AsyncEngine(engine, max_waiting=8, on_cancel=cancelled_ids.append)
    async_engine.start()
    try:
        stream = async_engine.open("reader", [5, 6, 7, 8], SamplingParams(max_tokens=3))
        outputs = [output async for output in stream]
        stream.close()
        # A second request passes through the step thread's inbox after the first one's close.
        second = async_engine.open("second", [5, 6, 7], SamplingParams(max_tokens=1))
        [output async for output in second]
        second.close()
    finally:
        async_engine.stop()

    assert outputs[-1].finished and cancelled_ids == []


def running_and_cache(url: str) -> tuple[float, float, float]:
    """Running sequences, cache memory they hold (kept prefixes give theirs up on demand), cancels."""
    text = httpx2.get(f"{url}/metrics").text
    held = metric(text, "inference_kv_cache_bytes") - metric(text, "inference_kv_cache_reusable_bytes")
    return (metric(text, "inference_running_sequences"), held,
            metric(text, "inference_requests_cancelled_total"))


def test_a_client_that_disconnects_mid_stream_leaves_nothing_running():
    engine = models.engine(models.tiny_model())
    with serving(service_for(engine)) as url:
        with httpx2.stream("POST", f"{url}/v1/chat/completions",
                          json=chat(**LEFT_BEFORE_ITS_END), timeout=60) as response:
            chunks = 0
            for line in response.iter_lines():
                chunks += line.startswith("data: ")
                if chunks == 4:
                    break
        waiting.wait_until(lambda: running_and_cache(url)[0] == 0, 30, "the sequence to be freed")
        running, cache_bytes, cancelled = running_and_cache(url)

    assert (running, cache_bytes, cancelled) == (0, 0, 1)


async def test_fifty_concurrent_cancels_leave_zero_running_and_all_cache_memory_free():
    engine = models.engine(models.tiny_model(), max_running=64, max_cached_tokens=65536,
                           cache_group_size=8)
    with serving(service_for(engine, max_waiting=64)) as url:
        async with httpx2.AsyncClient(timeout=120, limits=httpx2.Limits(max_connections=60)) as client:

            async def leave_after(chunks_wanted: int) -> int:
                seen = 0
                async with client.stream("POST", f"{url}/v1/chat/completions",
                                         json=chat(**LEFT_BEFORE_ITS_END)) as response:
                    async for line in response.aiter_lines():
                        seen += line.startswith("data: ")
                        if seen == chunks_wanted:
                            return seen
                return seen

            seen = await asyncio.gather(*(leave_after(3 + i % 5) for i in range(50)))
        await asyncio.to_thread(waiting.wait_until, lambda: running_and_cache(url)[0] == 0, 60,
                                "every sequence to be freed")
        running, cache_bytes, cancelled = running_and_cache(url)

    assert seen == [3 + i % 5 for i in range(50)]
    assert (running, cache_bytes, cancelled) == (0, 0, 50)
    assert engine.num_waiting == 0 and engine.kv_cache.num_reserved_tokens == 0
