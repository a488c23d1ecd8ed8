"""Send what is ready, never wait: upstream chunks that are waiting leave as one delta event."""

import json
import threading

import pytest
from asgiref.sync import sync_to_async

from chatapp.models import Generation
from tests.chat.streams import read_events, stop_after_deltas, text_of

pytestmark = pytest.mark.django_db(transaction=True)


async def send(api, conversation):
    return await api.post(f"/api/conversations/{conversation.pk}/messages", {"content": "Hi"},
                          content_type="application/json")


def deltas(events) -> list[str]:
    return [payload["text"] for name, payload in events if name == "delta"]


async def generation_of(conversation) -> Generation:
    found = Generation.objects.select_related("message")
    return await sync_to_async(found.get)(conversation=conversation)


async def test_a_backlog_of_upstream_chunks_leaves_as_one_delta_with_their_text_in_order(
        api, conversation, upstream):
    upstream.script.chunks = ["Hel", "lo", " ", "wor", "ld", "!", " 👋", " 你好"]
    upstream.script.one_write = True  # the whole answer waits in one network read

    events = await read_events(await send(api, conversation))

    generation = await generation_of(conversation)
    assert deltas(events) == ["Hel", "lo world! 👋 你好"]
    assert generation.message.content == generation.final_text == "Hello world! 👋 你好"
    assert events[-1][1]["status"] == "completed"


async def test_the_first_delta_goes_alone_even_when_more_is_waiting(api, conversation, upstream):
    upstream.script.chunks = ["First", " second", " third"]
    upstream.script.one_write = True

    events = await read_events(await send(api, conversation))

    assert deltas(events)[0] == "First"
    assert text_of(events) == "First second third"


async def test_a_single_ready_chunk_is_sent_alone(api, conversation, upstream):
    upstream.script.chunks = ["One", " two", " three", " four"]
    upstream.script.gate = threading.Semaphore(0)  # the next chunk comes once the last was read

    events = await read_events(await send(api, conversation), gate=upstream.script.gate)

    assert deltas(events) == ["One", " two", " three", " four"]


async def test_a_stop_inside_a_merged_delta_keeps_exactly_the_characters_the_user_saw(
        api, conversation, upstream):
    upstream.script.chunks = ["Alpha", " beta", " gamma", " 👋 delta", " epsilon"]
    upstream.script.one_write = True
    upstream.script.stall_after = 4  # four chunks in one read, then silence until hung up

    stopped, before, after = await stop_after_deltas(api, conversation, deltas=2, seen_chars=18)

    generation = await generation_of(conversation)
    assert [json.loads(e.data)["text"] for e in before if e.event == "delta"][1] == " beta gamma 👋 delta"
    assert stopped.status_code == 202 and after[-1][1]["status"] == "stopped"
    assert generation.message.content == generation.final_text == "Alpha beta gamma 👋"
    assert generation.stop_seen_chars == 18


async def test_the_audit_counts_upstream_chunks_not_events(api, conversation, upstream):
    upstream.script.chunks = ["a", "b", "c", "d", "e", "f"]
    upstream.script.one_write = True
    upstream.script.crash_after = 5  # no usage: the chunks stand for the tokens

    events = await read_events(await send(api, conversation))

    generation = await generation_of(conversation)
    assert deltas(events) == ["a", "bcde"]
    assert generation.output_tokens == 5 and generation.final_text == "abcde"
    assert generation.itl_mean_ms >= 0 and generation.itl_max_ms >= 0
