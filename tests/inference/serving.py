"""A real uvicorn server in a thread, serving an inference service built around a given engine."""

import asyncio
import json
from contextlib import contextmanager

import httpx2
from prometheus_client.parser import text_string_to_metric_families

from common.sse import SSEParser
from harness import waiting
from inference.config import InferenceConfig
from inference.engine import LLMEngine
from inference.server import create_app
from inference.service import InferenceService
from tests import servers
from tests.inference import models

MODEL_NAME = "tiny-test-model"


def service_for(engine, model_name: str = MODEL_NAME, **config) -> InferenceService:
    service = InferenceService(InferenceConfig(**config))
    service.attach(engine, model_name)
    return service


@contextmanager
def serving(service: InferenceService):
    """Yields the base URL; stops the server and the service's step loop afterwards."""
    try:
        with servers.uvicorn_in_thread(create_app(service, load=False)) as url:
            yield url
    finally:
        service.stop()


# The same weights served again under a name of its own: a second model for the chat to choose.
SECOND_MODEL_NAME = "smollm2-second"


@contextmanager
def real_model_serving(model_name: str = "SmolLM2-135M-Instruct", **limits):
    """The default model served as the chat app names it (or as `model_name`); yields the base URL."""
    engine = LLMEngine(models.real_model(), models.tokenizer(), models.limits(**limits))
    with serving(service_for(engine, model_name)) as url:
        yield url


def cancelled_on(url: str) -> float:
    """Requests the service at `url` ended because their client went away, once it runs nothing
    (its running gauge back at 0)."""
    waiting.wait_until(lambda: metric(httpx2.get(f"{url}/metrics").text, "inference_running_sequences") == 0,
                       30, f"{url} to be working on nothing")
    return metric(httpx2.get(f"{url}/metrics").text, "inference_requests_cancelled_total")


async def while_stalled(url: str, stall, send,
                        meanwhile=None) -> tuple[httpx2.Response, httpx2.Response]:
    """/health's answer (or the request `meanwhile(client)` makes) while `stall` (a stalling
    fake) holds the request `send(client)` makes, and that request's answer once released."""
    meanwhile = meanwhile or (lambda client: client.get(f"{url}/health", timeout=10))
    async with httpx2.AsyncClient(timeout=60) as client:
        pending = asyncio.ensure_future(send(client))
        try:
            assert await asyncio.to_thread(stall.entered.wait, 30)  # held there now
            health = await meanwhile(client)
            assert not pending.done()
        finally:
            stall.released.set()
        return health, await pending


def chat(content: str = "Hello there", **fields) -> dict:
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": content}]}
    body.update(fields)
    return body


def stream(url: str, body: dict, headers=None) -> tuple[httpx2.Response, list]:
    with httpx2.stream("POST", f"{url}/v1/chat/completions", json=body, headers=headers,
                      timeout=60) as response:
        body = response.read()
    return response, sse_events(body)


def sse_events(body: bytes) -> list:
    """The events of an SSE body, in order, read by the relay's own parser: the JSON objects,
    or the string "[DONE]"."""
    return [event.data if event.data == "[DONE]" else json.loads(event.data)
            for event in SSEParser().feed(body)]


def metric(text: str, name: str, **labels: str) -> float:
    """A sample's value in a Prometheus text exposition (prometheus_client reads it), summed over
    the labels not given; KeyError when no sample matches."""
    found = [sample.value for family in text_string_to_metric_families(text) for sample in family.samples
             if sample.name == name and labels.items() <= sample.labels.items()]
    if not found:
        raise KeyError(name)
    return sum(found)
