"""A real uvicorn server in a thread, serving an inference service built around a given engine."""

import json
from contextlib import contextmanager

from inference.config import InferenceConfig
from inference.server import create_app
from inference.service import InferenceService
from tests import servers

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


def chat(content: str = "Hello there", **fields) -> dict:
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": content}]}
    body.update(fields)
    return body


def sse_events(lines) -> list:
    """`data:` payloads of an SSE body, in order: JSON objects, or the string "[DONE]"."""
    events = []
    for line in lines:
        if line.startswith("data: "):
            payload = line[len("data: "):]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(name)
