"""The relay from the inference service to the browser, against a stand-in upstream."""

import threading

import pytest

from chatapp.models import Generation, Message
from harness import ports
from tests.chat.streams import names, read_events, text_of

pytestmark = pytest.mark.django_db(transaction=True)


def send_url(conversation) -> str:
    return f"/api/conversations/{conversation.pk}/messages"


async def send(api, conversation, content="Hi there"):
    return await api.post(send_url(conversation), {"content": content}, content_type="application/json")


def rows(conversation):
    answer = Message.objects.filter(conversation=conversation, role="assistant").last()
    return answer, Generation.objects.filter(conversation=conversation).last()


async def test_an_answer_streams_start_then_one_delta_per_upstream_chunk_then_done(api, conversation, upstream):
    upstream.script.chunks = ["Hel", "lo", " ", "wor", "ld", "!", " 👋", " 你好"]
    upstream.script.gate = threading.Semaphore(0)  # each chunk is sent once the last was read

    response = await send(api, conversation)
    events = await read_events(response, gate=upstream.script.gate)

    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"
    assert response["Cache-Control"] == "no-cache"
    assert response["X-Accel-Buffering"] == "no"
    assert names(events) == ["start"] + ["delta"] * 8 + ["done"]
    assert [p["text"] for n, p in events if n == "delta"] == upstream.script.chunks
    start, done = events[0][1], events[-1][1]
    assert start["model"] == "SmolLM2-135M-Instruct"
    assert start["heartbeat_s"] == 15  # the page ends a fetch silent for two of these
    assert done["finish_reason"] == "stop" and done["status"] == "completed"
    assert done["usage"] == {"prompt_tokens": 11, "completion_tokens": 8}
    assert done["ttft_ms"] > 0


async def test_the_rows_hold_the_answer_and_a_complete_audit(api, conversation, upstream, user):
    response = await send(api, conversation, "What is up?")
    events = await read_events(response)

    answer, generation = await rows_async(conversation)
    body, headers = upstream.requests[-1]
    assert answer.content == "Hello, world!" == text_of(events) == generation.final_text
    assert answer.status == "completed"
    assert generation.user_id == user.pk and generation.message_id == answer.pk
    assert headers["x-request-id"] == str(generation.request_id) == events[0][1]["request_id"]
    assert body["messages"][-1] == {"role": "user", "content": "What is up?"}
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert generation.sampling == {"temperature": 0.7, "top_p": 0.9, "max_tokens": 512}
    assert generation.prompt_messages == 1
    assert (generation.input_tokens, generation.output_tokens) == (11, 4)
    assert generation.finish_reason == "stop" and generation.cancelled_by == ""
    assert generation.ttft_ms > 0 and generation.itl_mean_ms >= 0 and generation.itl_max_ms >= 0
    assert generation.first_token_at >= generation.started_at
    assert generation.finished_at >= generation.first_token_at


async def test_a_finished_answer_leaves_its_upstream_connection_to_the_next(api, conversation, upstream):
    await read_events(await send(api, conversation))
    await read_events(await send(api, conversation, "And again?"))

    assert len(upstream.clients) == 2
    assert upstream.clients[0] == upstream.clients[1]  # the same client port: one connection
    assert not upstream.hung_up.is_set()


async def rows_async(conversation):
    from asgiref.sync import sync_to_async

    return await sync_to_async(rows)(conversation)


async def test_hitting_max_tokens_leaves_a_truncated_answer(api, conversation, upstream):
    upstream.script.finish_reason = "length"

    events = await read_events(await send(api, conversation))

    answer, generation = await rows_async(conversation)
    assert events[-1][1]["status"] == "truncated"
    assert answer.status == "truncated" and generation.finish_reason == "length"


async def test_a_tgi_style_upstream_is_understood(api, conversation, upstream):
    upstream.script.tgi_style = True

    events = await read_events(await send(api, conversation))

    assert text_of(events) == "Hello, world!"
    assert events[-1][1]["finish_reason"] == "stop"


@pytest.mark.parametrize("unstorable", ["\x00", "\ud800"], ids=["nul", "lone_surrogate"])
async def test_an_answer_holding_a_character_no_database_stores_is_stored_as_shown_with_a_replacement(
        api, conversation, upstream, unstorable):
    # A byte-level model may sample the token of byte 0, and a peer's JSON may escape half a
    # surrogate pair: PostgreSQL refuses the first in text, UTF-8 cannot encode the second.
    upstream.script.chunks = ["Hel", f"lo{unstorable}", " world"]

    events = await read_events(await send(api, conversation))

    answer, generation = await rows_async(conversation)
    assert names(events)[0] == "start" and names(events)[-1] == "done" and "error" not in names(events)
    assert events[-1][1]["status"] == "completed"
    assert text_of(events) == "Hello\ufffd world" == answer.content == generation.final_text
    assert answer.status == "completed"


@pytest.mark.parametrize("fault, code", [
    ("crash_after", "upstream_disconnected"),
    ("garbage_after", "upstream_protocol"),
    ("error_after", "engine_error"),
])
async def test_a_failure_after_the_first_byte_keeps_the_partial_text_and_says_so(
        api, conversation, upstream, fault, code):
    setattr(upstream.script, fault, 2)

    events = await read_events(await send(api, conversation))

    answer, generation = await rows_async(conversation)
    assert names(events) == ["start", "delta", "delta", "error", "done"]
    assert events[-2][1]["code"] == code and events[-2][1]["message"]
    assert events[-1][1]["status"] == "failed"
    assert answer.content == "Hello," and answer.status == "failed"
    assert generation.finish_reason == "error" and generation.error_code == code
    assert generation.final_text == "Hello,"


@pytest.mark.parametrize("content", [["a"], 5, {"text": "a"}], ids=["list", "number", "object"])
async def test_a_delta_whose_content_is_no_text_fails_the_answer_as_the_upstreams_protocol_error(
        api, conversation, upstream, content):
    upstream.script.chunks = ["Hel", "lo,", content, " world"]

    events = await read_events(await send(api, conversation))

    answer, generation = await rows_async(conversation)
    assert names(events)[-2:] == ["error", "done"]
    assert events[-2][1]["code"] == "upstream_protocol" and events[-1][1]["status"] == "failed"
    assert text_of(events) == "Hello," == answer.content == generation.final_text
    assert generation.error_code == "upstream_protocol"


async def test_an_upstream_silent_past_the_read_timeout_fails_the_answer_as_a_timeout(
        api, conversation, upstream, settings):
    settings.INFERENCE_READ_TIMEOUT_SECONDS = 0.5
    upstream.script.stall_after = 2

    events = await read_events(await send(api, conversation))

    answer, generation = await rows_async(conversation)
    assert events[-2] == ("error", {"code": "upstream_timeout",
                                    "message": "the inference service sent nothing for 0.5 s"})
    assert events[-1][1]["status"] == "failed" and answer.content == "Hello,"
    assert generation.error_code == "upstream_timeout"


async def test_a_stream_that_ends_without_done_is_a_failure(api, conversation, upstream):
    upstream.script.send_done = False

    events = await read_events(await send(api, conversation))

    answer, generation = await rows_async(conversation)
    assert events[-2] == ("error", {"code": "upstream_disconnected",
                                    "message": "the stream ended without [DONE]"})
    assert answer.status == "failed" and answer.content == "Hello, world!"


@pytest.mark.parametrize("status, expected, code", [(500, 502, "upstream_error"),
                                                    (503, 503, "upstream_busy"),
                                                    (429, 503, "upstream_busy")])
async def test_an_upstream_refusal_before_the_first_byte_is_a_json_error_and_a_failed_audit_row(
        api, conversation, upstream, status, expected, code):
    upstream.script.status = status

    response = await send(api, conversation)

    answer, generation = await rows_async(conversation)
    assert response.status_code == expected
    assert response["Content-Type"] == "application/json"
    assert response.json()["error"]["code"] == code
    assert response.get("Retry-After") == ("1" if code == "upstream_busy" else None)  # busy: soon free
    assert "upstream says no" in response.json()["error"]["message"]
    assert answer is None  # the conversation as it was: the page gives the text back to resend
    assert generation.status == "failed" and generation.error_code == code


@pytest.mark.parametrize("told, passed_on", [("12", "12"), ("0", "1"), ("86400", "60"), ("soon", "1")])
async def test_a_busy_upstreams_own_retry_after_is_passed_on_within_bounds(
        api, conversation, upstream, told, passed_on):
    """Our inference service says 5 s while its model loads; the browser was told 1 s."""
    upstream.script.status, upstream.script.retry_after = 503, told

    response = await send(api, conversation)

    assert response.json()["error"]["code"] == "upstream_busy"
    assert response["Retry-After"] == passed_on


# What the user can change and trying again cannot help with, from our inference service: a
# template's raise_exception (a system message where the model takes none); a prompt the
# upstream counted past its context (our count was an estimate where it could not count, or a
# replica's context is smaller than the one the prompt was fitted to).
@pytest.mark.parametrize("upstream_code, code", [("invalid_messages", "model_refuses_messages"),
                                                 ("context_length_exceeded", "context_too_long")])
async def test_an_upstream_400_the_user_can_act_on_is_a_400_that_says_so(
        api, conversation, upstream, upstream_code, code):
    upstream.script.status, upstream.script.error_code = 400, upstream_code

    response = await send(api, conversation)

    answer, generation = await rows_async(conversation)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == code
    assert "upstream says no" in response.json()["error"]["message"]
    assert answer is None and generation.error_code == code


async def test_an_unreachable_upstream_is_a_502_with_a_clear_message(api, conversation, settings):
    settings.INFERENCE_URL = f"http://127.0.0.1:{ports.free_port()}"

    response = await send(api, conversation)

    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_unreachable"
    assert "unreachable" in response.json()["error"]["message"]
    assert response["Retry-After"] == "5"  # a service restarting: back in seconds, not at once
    answer, generation = await rows_async(conversation)
    assert answer is None and generation.finish_reason == "error"


async def test_a_quiet_upstream_gets_heartbeats_to_the_browser(api, conversation, upstream, settings):
    settings.CHAT_HEARTBEAT_SECONDS = 0.05
    upstream.script.chunks = ["slow", " answer"]
    upstream.script.interval_s = 0.3

    events = await read_events(await send(api, conversation))

    assert "ping" in names(events)
    assert text_of(events) == "slow answer"


@pytest.mark.parametrize("answer", ["new", "continued"])
async def test_the_partial_text_is_saved_while_streaming_not_only_at_the_end(
        api, conversation, upstream, settings, answer):
    from asgiref.sync import sync_to_async

    earlier = ""
    if answer == "continued":  # a truncated answer first: its text leads the saved content
        upstream.script.finish_reason = "length"
        await read_events(await send(api, conversation))
        truncated, _ = await rows_async(conversation)
        earlier, upstream.script.finish_reason = truncated.content, "stop"
    settings.CHAT_SAVE_INTERVAL_SECONDS = 0.1
    upstream.script.chunks = [f"w{i} " for i in range(12)]
    upstream.script.interval_s = 0.05
    seen_while_streaming = []
    response = await (send(api, conversation) if answer == "new" else
                      api.post(f"/api/messages/{truncated.pk}/continue"))
    async for chunk in response.streaming_content:
        if b"w9 " in chunk:
            answer_row, _ = await sync_to_async(rows)(conversation)
            seen_while_streaming.append((answer_row.status, answer_row.content))

    assert seen_while_streaming[0][0] == "streaming"
    assert seen_while_streaming[0][1].startswith(earlier + "w0 w1 ")
    assert earlier or answer == "new"


async def test_the_page_is_told_how_much_of_its_answer_is_stored_as_partial_saves_commit(
        api, conversation, upstream, settings):
    settings.CHAT_SAVE_INTERVAL_SECONDS = 0.1
    upstream.script.chunks = [f"w{i} " for i in range(12)]
    upstream.script.interval_s = 0.05

    events = await read_events(await send(api, conversation))

    deltas = [payload for name, payload in events if name == "delta"]
    held, told = 0, []  # code points the page held before each `saved`, and what it said
    for delta in deltas:
        if "saved" in delta:
            told.append((held, delta["saved"]))
        held += len(delta["text"])
    assert told, "no delta said what was stored"
    boundaries = {len("".join(d["text"] for d in deltas[:i])) for i in range(len(deltas) + 1)}
    assert all(0 < saved <= before and saved in boundaries for before, saved in told)
    assert [saved for _, saved in told] == sorted({saved for _, saved in told})  # news only, growing


async def test_an_answer_past_its_time_limit_is_stopped_and_its_upstream_closed(
        api, conversation, upstream, settings):
    import asyncio

    # Counted from the answer's start: its first two deltas must come within it (they did not
    # within 0.5 s once, in CI on two busy cores), then the upstream stalls.
    settings.CHAT_GENERATION_TIMEOUT_SECONDS = 2
    upstream.script.stall_after = 2

    events = await read_events(await send(api, conversation))
    hung_up = await asyncio.to_thread(upstream.hung_up.wait, 10)

    answer, generation = await rows_async(conversation)
    assert names(events) == ["start", "delta", "delta", "done"]
    assert events[-1][1]["status"] == "stopped"
    assert hung_up
    assert (generation.finish_reason, generation.cancelled_by) == ("cancelled", "timeout")
    assert answer.content == "Hello,"
