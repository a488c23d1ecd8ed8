"""The step thread hands a step's outputs to the event loop in one wake-up, in order."""

import asyncio

from inference.async_engine import AsyncEngine
from inference.engine import SamplingParams
from tests.inference import models


async def test_a_step_wakes_the_event_loop_once_for_all_the_streams_it_advanced():
    engine = models.engine(models.tiny_model())
    loop = asyncio.get_running_loop()
    wake_ups = 0
    call_soon_threadsafe = loop.call_soon_threadsafe

    def counting(*args, **kwargs):
        nonlocal wake_ups
        wake_ups += 1
        return call_soon_threadsafe(*args, **kwargs)

    loop.call_soon_threadsafe = counting
    async_engine = AsyncEngine(engine, max_waiting=8)
    async_engine.start()
    try:
        streams = [async_engine.open(f"r{i}", [5, 6, 7, 8 + i], SamplingParams(max_tokens=12))
                   for i in range(4)]
        outputs = [[output async for output in stream] for stream in streams]
    finally:
        for stream in streams:
            stream.close()
        async_engine.stop()
        del loop.call_soon_threadsafe

    num_outputs = sum(len(each) for each in outputs)
    assert all(each[-1].finished for each in outputs)
    assert [output.num_output_tokens for output in outputs[0]] == list(range(1, len(outputs[0]) + 1))
    # One hand-off per step (plus the final one for streams still open when the loop stops).
    assert wake_ups <= engine.num_steps + 1 < num_outputs


async def test_an_id_used_again_as_its_last_request_leaves_streams_only_the_new_requests_tokens(
        monkeypatch):
    # A client that retries under the same X-Request-Id (a gateway's tracing id) opens the new
    # request while the one it left is still in the step thread's inbox: before the step thread
    # took it, the engine fed the left prompt to the new stream as well.
    model = models.tiny_model()
    left_prompt, own_prompt = [5, 6, 7, 8, 9, 10], [11, 12, 13]
    alone = models.generate_alone(model, own_prompt, max_tokens=8)
    async_engine = AsyncEngine(models.engine(model), max_waiting=8)
    params = SamplingParams(max_tokens=8)
    with monkeypatch.context() as before_the_step_thread_runs:
        before_the_step_thread_runs.setattr(AsyncEngine, "healthy", property(lambda self: True))
        async_engine.open("retried", left_prompt, params).close()
        stream = async_engine.open("retried", own_prompt, params)
    async_engine.start()
    try:
        outputs = [output async for output in stream]
    finally:
        stream.close()
        async_engine.stop()

    assert [output.token_id for output in outputs] == alone
    assert outputs[-1].num_prompt_tokens == len(own_prompt)
    assert async_engine.engine.num_running == 0 and async_engine.engine.num_waiting == 0


async def test_two_requests_open_at_once_under_one_id_each_stream_their_own_tokens():
    model = models.tiny_model()
    prompts = [[5, 6, 7, 8, 9, 10], [11, 12, 13]]
    alone = [models.generate_alone(model, prompt, max_tokens=8) for prompt in prompts]
    async_engine = AsyncEngine(models.engine(model), max_waiting=8)
    async_engine.start()
    try:
        streams = [async_engine.open("shared-trace-id", prompt, SamplingParams(max_tokens=8))
                   for prompt in prompts]
        outputs = await asyncio.gather(*map(read_all, streams))
    finally:
        for stream in streams:
            stream.close()
        async_engine.stop()

    assert [[output.token_id for output in each] for each in outputs] == alone


async def read_all(stream) -> list:
    return [output async for output in stream]
