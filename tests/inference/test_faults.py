"""A failing step ends every open stream with an error event, never a hang."""

import asyncio

import httpx

from tests.fakes.failing_runner import FailingRunner
from tests.inference import models
from tests.inference.serving import chat, serving, service_for, sse_events


async def test_a_step_that_raises_ends_every_open_stream_with_an_error_event():
    engine = models.engine(models.tiny_model())
    engine.runner = FailingRunner(engine.runner, after_steps=5)
    with serving(service_for(engine)) as url:
        async with httpx.AsyncClient(timeout=60) as client:

            async def read_all() -> list:
                async with client.stream("POST", f"{url}/v1/chat/completions",
                                         json=chat(stream=True, max_tokens=500)) as response:
                    return sse_events([line async for line in response.aiter_lines()])

            streams = await asyncio.gather(*(read_all() for _ in range(4)))
            health = await client.get(f"{url}/health")
            refused = await client.post(f"{url}/v1/chat/completions", json=chat(stream=True))

    for events in streams:
        assert events[-1] == "[DONE]"
        error = events[-2]["error"]
        assert error["type"] == "server_error"
        assert "injected fault" in error["message"]
    assert health.status_code == 503 and health.json()["status"] == "unhealthy"
    assert "injected fault" in health.json()["error"]
    assert refused.status_code == 503
    assert engine.num_running == 0 and engine.kv_cache.num_allocated_bytes == 0
