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
