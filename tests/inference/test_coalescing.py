"""The service's SSE writer sends what is ready and never waits: outputs that queued while it
was busy go out as one event, a lone output goes at once, and the first text always alone.

The writer is driven directly, with the real engine's outputs handed to its stream by the test,
so that which outputs are waiting when it looks is decided here rather than by timing.
"""

import asyncio
import json

import pytest

from inference import server
from inference.async_engine import AsyncEngine, RequestFailed, RequestStream
from inference.config import InferenceConfig
from inference.engine import SamplingParams
from inference.metrics import RequestClock
from inference.protocol import SSE_HEARTBEAT, CompletionShape, parse_chat_request, sse
from inference.service import InferenceService
from tests.inference import models
from tests.inference.serving import chat, metric, sse_events


@pytest.fixture(scope="module")
def engine():
    return models.engine(models.tiny_model())


@pytest.fixture(scope="module")
def outputs(engine):
    """One request's eight outputs from the real engine, each with its own text."""
    engine.add_request("r", [5, 6, 7, 8], SamplingParams(max_tokens=8, temperature=1.0, seed=7))
    outputs = []
    while engine.has_work():
        outputs += engine.step()
    assert len({output.text for output in outputs}) == 8 and outputs[-1].finished
    return outputs


class Writer:
    """The SSE writer of one streamed request whose engine outputs the test hands over."""

    def __init__(self, engine):
        self.queue = asyncio.Queue()
        self.service = InferenceService(InferenceConfig())
        body = chat(stream=True, stream_options={"include_usage": True})
        self.events = server.completion_events(
            RequestStream(AsyncEngine(engine, max_waiting=8), "r", self.queue),
            CompletionShape("chatcmpl-r", "m"), parse_chat_request(json.dumps(body).encode()),
            RequestClock(self.service.metrics), self.service)

    def hand(self, *items) -> None:
        for item in items:
            self.queue.put_nowait(item)

    async def next(self):
        raw = await anext(self.events)
        return raw if raw == SSE_HEARTBEAT else sse_events(raw)[0]

    async def rest(self) -> list:
        return [sse_events(raw)[0] async for raw in self.events]

    def metric(self, name: str) -> float:
        return metric(self.service.metrics.render().decode(), name)


def content(event) -> str | None:
    if isinstance(event, str) or not event["choices"]:
        return None  # [DONE], or the usage chunk
    return event["choices"][0]["delta"].get("content")


async def test_a_backlog_of_outputs_goes_as_one_event_with_their_texts_in_order(engine, outputs):
    writer = Writer(engine)
    await writer.next()  # the role
    writer.hand(outputs[0])
    first = await writer.next()
    writer.hand(*outputs[1:])
    events = await writer.rest()

    assert content(first) == outputs[0].text
    assert content(events[0]) == "".join(output.text for output in outputs[1:])
    assert events[1]["choices"][0]["finish_reason"] == "length"
    assert events[2]["usage"]["completion_tokens"] == 8
    assert events[3] == "[DONE]" and len(events) == 4
    # The metrics still count and time every engine token.
    assert writer.metric("inference_generated_tokens_total") == 8
    assert writer.metric("inference_inter_token_latency_seconds_count") == 7


async def test_the_first_text_goes_alone_even_when_others_are_waiting(engine, outputs):
    writer = Writer(engine)
    writer.hand(*outputs)
    events = [await writer.next() for _ in range(3)]

    assert events[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert content(events[1]) == outputs[0].text
    assert content(events[2]) == "".join(output.text for output in outputs[1:])


async def test_a_single_ready_output_is_sent_alone_at_once(engine, outputs):
    writer = Writer(engine)
    await writer.next()
    sent = []
    for output in outputs:
        writer.hand(output)
        sent.append(content(await writer.next()))

    assert sent == [output.text for output in outputs]


async def test_the_streamed_text_is_the_engines_text_exactly_whatever_the_backlogs(engine, outputs):
    writer = Writer(engine)
    await writer.next()
    sent = []
    for group in (outputs[:1], outputs[1:4], outputs[4:5], outputs[5:7]):
        writer.hand(*group)
        sent.append(content(await writer.next()))
    writer.hand(outputs[7])
    sent += [content(event) for event in await writer.rest()]

    assert "".join(text for text in sent if text) == "".join(output.text for output in outputs)
    assert len([text for text in sent if text]) == 5


async def test_an_error_behind_a_backlog_follows_the_backlogs_text(engine, outputs):
    writer = Writer(engine)
    await writer.next()
    writer.hand(outputs[0])
    await writer.next()
    writer.hand(outputs[1], outputs[2], RequestFailed("the request failed alone"))
    events = await writer.rest()

    assert content(events[0]) == outputs[1].text + outputs[2].text
    assert events[1]["error"]["message"] == "the request failed alone"
    assert events[2] == "[DONE]"


async def test_a_quiet_stream_sends_heartbeats_until_its_next_output(engine, outputs, monkeypatch):
    monkeypatch.setattr(server, "HEARTBEAT_INTERVAL_S", 0.01)
    writer = Writer(engine)
    await writer.next()

    assert await writer.next() == SSE_HEARTBEAT
    writer.hand(outputs[0])
    assert content(await writer.next()) == outputs[0].text


@pytest.mark.parametrize("text", ["plain", 'a "quote", a \\ and a\nnewline', "héllo 世界 🙂", "\x00", ""])
def test_a_content_event_is_byte_for_byte_the_chunk_the_shape_builds(text):
    shape = CompletionShape("chatcmpl-r", "m")

    assert shape.content_event(text) == sse(shape.chunk({"content": text}))


async def test_the_writer_starts_no_task_per_output(engine, outputs):
    loop = asyncio.get_running_loop()
    started = []

    def counting_factory(loop, coroutine, **kwargs):
        started.append(coroutine)
        return asyncio.Task(coroutine, loop=loop, **kwargs)

    writer = Writer(engine)
    await writer.next()
    loop.set_task_factory(counting_factory)
    try:
        for output in outputs:
            writer.hand(output)
            await writer.next()
    finally:
        loop.set_task_factory(None)

    assert started == []
