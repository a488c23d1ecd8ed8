"""The prompt's token count is recorded however the answer ends: the upstream says it at open.

Our inference service sends `X-Prompt-Tokens` with its response headers; the stand-in says it
when a test asks. An answer cut short never gets the usage chunk that ends a stream.
"""

import json

import pytest
from asgiref.sync import sync_to_async

from chatapp.models import Generation
from chatapp.tasks import fail_interrupted_streams
from tests.chat.streams import Browser, read_events, stop_after_deltas

pytestmark = pytest.mark.django_db(transaction=True)


def generation_of(conversation) -> Generation:
    return Generation.objects.get(conversation=conversation)


async def answer(api, conversation) -> list:
    return await read_events(await api.post(f"/api/conversations/{conversation.pk}/messages",
                                            json.dumps({"content": "go"}), content_type="application/json"))


async def test_an_answer_stopped_by_its_user_records_the_prompts_tokens(api, conversation, upstream):
    upstream.script.prompt_tokens_header = 23
    upstream.script.chunks = [f" w{i}" for i in range(40)]
    upstream.script.interval_s = 0.05

    stopped, _, after = await stop_after_deltas(api, conversation, deltas=2, seen_chars=3)

    generation = await sync_to_async(generation_of)(conversation)
    assert stopped.status_code == 202 and after[-1][1]["status"] == "stopped"
    assert generation.input_tokens == 23
    assert after[-1][1]["usage"]["prompt_tokens"] == 23


async def test_an_answer_that_failed_mid_stream_records_the_prompts_tokens(api, conversation, upstream):
    upstream.script.prompt_tokens_header = 23
    upstream.script.crash_after = 2

    events = await answer(api, conversation)

    generation = await sync_to_async(generation_of)(conversation)
    assert events[-1][1]["status"] == "failed"
    assert generation.input_tokens == 23


async def test_an_answer_whose_browser_left_records_the_prompts_tokens(api, conversation, upstream):
    upstream.script.prompt_tokens_header = 23
    upstream.script.chunks = ["One", " two", " three", " four"]
    upstream.script.interval_s = 0.3
    browser = Browser(api, f"/api/conversations/{conversation.pk}/messages")

    await browser.post({"content": "count"})
    await browser.read_until(deltas=1)
    await browser.hang_up()

    generation = await sync_to_async(generation_of)(conversation)
    assert generation.cancelled_by == "client_gone" and generation.input_tokens == 23


async def test_the_upstreams_final_usage_wins_over_what_it_said_at_open(api, conversation, upstream):
    upstream.script.prompt_tokens_header = 7  # the usage chunk says 11

    await answer(api, conversation)

    assert (await sync_to_async(generation_of)(conversation)).input_tokens == 11


@pytest.mark.parametrize("header", [None, "many", "-3", "99999999999", "²", "9" * 5000])
async def test_a_peer_that_does_not_say_the_count_leaves_it_unknown_when_the_stream_breaks(
        api, conversation, upstream, header):
    upstream.script.prompt_tokens_header = header
    upstream.script.crash_after = 1

    events = await answer(api, conversation)

    generation = await sync_to_async(generation_of)(conversation)
    assert events[-1][1]["status"] == "failed" and generation.input_tokens is None


async def test_an_answer_whose_relay_died_records_the_prompts_tokens_and_no_count_it_never_made(
        api, conversation, upstream, settings):
    upstream.script.prompt_tokens_header = 23
    upstream.script.chunks = ["One", " two"]
    upstream.script.stall_after = 1  # still streaming when its relay is taken for dead
    browser = Browser(api, f"/api/conversations/{conversation.pk}/messages")
    await browser.post({"content": "count"})
    await browser.read_until(deltas=1)

    streaming = await sync_to_async(generation_of)(conversation)
    settings.CHAT_STALE_STREAM_SECONDS = 0  # as the reaper finds a relay whose process died
    await sync_to_async(fail_interrupted_streams)()
    reaped = await sync_to_async(generation_of)(conversation)
    await browser.hang_up()

    assert streaming.input_tokens == 23  # known from the answer's start on, as docs/api.md says
    assert (reaped.status, reaped.error_code) == ("failed", "interrupted")
    assert (reaped.input_tokens, reaped.output_tokens) == (23, None)  # nobody counted its tokens
