"""A request that fails ends alone; an engine that cannot step ends every open stream, never hangs."""

import asyncio
import threading

import httpx2
import pytest

from common.vocabulary import FinishReason
from harness import waiting
from harness.ports import free_port
from inference.engine import SamplingParams
from inference.server import EXIT_ENGINE_DIED, serve
from tests.fakes.failing_runner import FailingRunner
from tests.fakes.poisoned_runner import PoisonedRunner
from tests.inference import models
from tests.inference.serving import chat, serving, service_for, sse_events


async def test_a_step_that_raises_ends_every_open_stream_with_an_error_event():
    engine = models.engine(models.tiny_model())
    engine.runner = FailingRunner(engine.runner, after_steps=5)
    with serving(service_for(engine)) as url:
        async with httpx2.AsyncClient(timeout=60) as client:

            async def read_all() -> list:
                async with client.stream("POST", f"{url}/v1/chat/completions",
                                         json=chat(stream=True, max_tokens=500)) as response:
                    return sse_events(await response.aread())

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


def test_a_service_whose_engine_died_ends_its_streams_then_exits_for_a_fresh_one_to_start():
    """A step loop that died never steps again: the process ends, with a status that says so,
    once each open stream has its error, for `make run`'s supervisor or Docker's restart policy
    to start a fresh one (as vLLM's server does), rather than answering 503 until someone looks."""
    engine = models.engine(models.tiny_model())
    engine.runner = FailingRunner(engine.runner, after_steps=5)
    service, port = service_for(engine), free_port()
    url = f"http://127.0.0.1:{port}"
    statuses = []
    server = threading.Thread(target=lambda: statuses.append(serve(service, "127.0.0.1", port)),
                              name="served until its engine dies", daemon=True)
    server.start()
    waiting.wait_until(lambda: waiting.healthy(f"{url}/health"), 30, "the service to serve")

    async def read_all() -> list:
        async with httpx2.AsyncClient(timeout=60) as client:
            async with client.stream("POST", f"{url}/v1/chat/completions",
                                     json=chat(stream=True, max_tokens=500)) as response:
                return sse_events(await response.aread())

    async def three_streams() -> list:
        return await asyncio.gather(*(read_all() for _ in range(3)))

    streams = asyncio.run(three_streams())
    server.join(timeout=30)

    for events in streams:
        assert events[-1] == "[DONE]"
        assert "injected fault" in events[-2]["error"]["message"]
    assert not server.is_alive() and statuses == [EXIT_ENGINE_DIED]
    with pytest.raises(httpx2.ConnectError):
        httpx2.get(f"{url}/health", timeout=5)
    assert engine.num_running == 0 and engine.kv_cache.num_allocated_bytes == 0


async def test_a_request_whose_step_raises_ends_alone_while_its_neighbours_finish():
    engine = models.engine(models.tiny_model())
    engine.runner = PoisonedRunner(engine.runner, "poisoned")
    body = chat(stream=True, max_tokens=12, temperature=0)
    with serving(service_for(engine)) as url:
        async with httpx2.AsyncClient(timeout=60) as client:

            async def read_all(request_id: str) -> list:
                async with client.stream("POST", f"{url}/v1/chat/completions", json=body,
                                         headers={"X-Request-Id": request_id}) as response:
                    return sse_events(await response.aread())

            poisoned, *neighbours = await asyncio.gather(
                read_all("poisoned"), *(read_all(f"neighbour-{i}") for i in range(3)))
            health = await client.get(f"{url}/health")
            alone = await read_all("alone-afterwards")
            whole = await client.post(f"{url}/v1/chat/completions", json={**body, "stream": False},
                                      headers={"X-Request-Id": "poisoned"})

    assert poisoned[-1] == "[DONE]"
    assert "injected fault for poisoned" in poisoned[-2]["error"]["message"]
    for events in neighbours:
        assert events[-1] == "[DONE]"
        assert events[-2]["choices"][0]["finish_reason"] == "length"
        assert text_of(events) == text_of(alone)  # the failed step left no trace in their cache
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert whole.status_code == 500 and whole.json()["error"]["code"] == "engine_error"
    assert "injected fault for poisoned" in whole.json()["error"]["message"]
    assert engine.num_running == 0 and models.holds_only_reusable_memory(engine)


def test_a_step_that_fails_for_one_sequence_is_retried_without_it_and_changes_nobody_elses_tokens():
    model = models.tiny_model()
    prompts = [models.engine_tokenizer_prompt([{"role": "user", "content": f"Question {i}?"}])
               for i in range(3)]
    params = SamplingParams(max_tokens=8)
    clean, poisoned = models.engine(model), models.engine(model)
    poison = poisoned.runner = PoisonedRunner(poisoned.runner, "poisoned")
    for engine in (clean, poisoned):
        for i, prompt in enumerate(prompts):
            engine.add_request(f"neighbour-{i}", prompt, params)
    poisoned.add_request("poisoned", prompts[0], params)

    tokens = {"clean": run_to_the_end(clean), "poisoned": run_to_the_end(poisoned)}

    assert poison.num_refused_steps == 2  # the shared first step, then the poisoned one alone
    failure = tokens["poisoned"].pop("poisoned")
    assert failure == [None]
    assert tokens["poisoned"] == tokens["clean"]
    assert poisoned.num_running == 0 and models.holds_only_reusable_memory(poisoned)


def run_to_the_end(engine) -> dict[str, list]:
    tokens: dict[str, list] = {}
    while engine.has_work():
        for output in engine.step():
            tokens.setdefault(output.request_id, []).append(output.token_id)
    return tokens


def test_a_sequence_whose_sampling_fails_ends_alone_while_its_neighbours_finish():
    engine = models.engine(models.tiny_model())
    prompt = models.engine_tokenizer_prompt([{"role": "user", "content": "Hello there"}])
    # A NaN temperature makes every probability NaN: torch refuses to draw from them.
    engine.add_request("nan", prompt, SamplingParams(max_tokens=5, temperature=float("nan")))
    engine.add_request("fine", prompt, SamplingParams(max_tokens=5, temperature=0.7, seed=1))

    outputs = []
    while engine.has_work():
        outputs.extend(engine.step())

    failed = [o for o in outputs if o.request_id == "nan"]
    fine = [o for o in outputs if o.request_id == "fine"]
    assert len(failed) == 1 and failed[0].finish_reason is FinishReason.ERROR
    assert "probability" in failed[0].error
    assert len(fine) == 5 and fine[-1].finish_reason is FinishReason.LENGTH
    assert models.holds_only_reusable_memory(engine)


def text_of(events: list) -> str:
    return "".join(e["choices"][0]["delta"].get("content", "")
                   for e in events[:-1] if e.get("choices"))
