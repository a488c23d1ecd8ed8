"""A conversation over the API, answered by the real inference service with the default model;
and two such services under two model names, each conversation answered by its own."""

import asyncio
import time

import httpx2
import pytest
from asgiref.sync import sync_to_async

from benchmarks.workload import meeting_notes
from chatapp import selectors
from chatapp.models import Generation, Message
from chatapp.upstream import models as upstream_models
from harness import waiting
from tests import factories
from tests.chat.streams import Browser, names, read_events, stop_after_deltas, stop_side_by_side, text_of
from tests.inference.serving import SECOND_MODEL_NAME, cancelled_on, metric, real_model_serving

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


async def test_a_signed_in_user_holds_a_conversation_with_streamed_answers(
        api, conversation, settings, real_model_url):
    settings.INFERENCE_URL = real_model_url
    settings.CHAT_MAX_TOKENS = 40
    settings.CHAT_TEMPERATURE = 0  # greedy, so that the answer is known
    url = f"/api/conversations/{conversation.pk}/messages"

    first = await read_events(await api.post(url, {"content": "What is the capital of France?"},
                                             content_type="application/json"))
    second = await read_events(await api.post(url, {"content": "And of Italy?"},
                                              content_type="application/json"))

    history = (await api.get(url)).json()["results"]
    generations = await sync_to_async(list)(Generation.objects.filter(conversation=conversation).order_by("pk"))
    for events, generation in zip((first, second), generations):
        assert names(events)[0] == "start" and names(events)[-1] == "done"
        assert names(events).count("delta") >= 1
        assert events[-1][1]["status"] in ("completed", "truncated")
        assert text_of(events) == generation.final_text
        assert generation.input_tokens > 0 and 0 < generation.output_tokens <= 40
        assert generation.ttft_ms > 0
    assert "Paris" in text_of(first)
    assert [m["role"] for m in history] == ["user", "assistant", "user", "assistant"]
    assert generations[1].prompt_messages == 3


async def test_an_answer_stopped_before_its_end_records_the_same_prompt_tokens_as_a_finished_one(
        api, user, settings, real_model_url):
    settings.INFERENCE_URL = real_model_url
    settings.CHAT_MAX_TOKENS = 40
    settings.CHAT_TEMPERATURE = 0
    finished, stopped = await sync_to_async(lambda: [factories.conversation(owner=user) for _ in range(2)])()
    question = "Tell me about the history of France."

    await read_events(await api.post(f"/api/conversations/{finished.pk}/messages", {"content": question},
                                     content_type="application/json"))
    stop, _, after = await stop_after_deltas(api, stopped, deltas=2, seen_chars=1, content=question)

    whole, cut = [await sync_to_async(Generation.objects.get)(conversation=c) for c in (finished, stopped)]
    assert stop.status_code == 202 and after[-1][1]["status"] == "stopped"
    assert whole.status in ("completed", "truncated") and cut.status == "stopped"
    assert cut.input_tokens == whole.input_tokens > 0  # the first from the header, the second from usage


# --- the context: the whole of it, counted by the service ---
@pytest.fixture(scope="module")
def whole_context_url():
    """The service with the default model's whole context, 8,192 positions."""
    with real_model_serving(max_running=2, max_model_len=8192, max_cached_tokens=16384,
                            prefill_chunk_idle=512) as url:
        yield url


def service_count(url: str, messages: list[dict]) -> int:
    return httpx2.post(f"{url}/tokenize", json={"messages": messages}, timeout=30).json()["count"]


def prompt_of(generation: Generation, system: list[dict]) -> list[dict]:
    """What the model was sent for this answer, read back from the rows."""
    messages = Message.objects.filter(conversation=generation.conversation_id, pk__lt=generation.message_id)
    if generation.context_from_message_id is not None:
        messages = messages.filter(pk__gte=generation.context_from_message_id)
    return system + [{"role": m.role, "content": m.content} for m in messages.order_by("pk")]


async def test_an_eight_turn_conversation_keeps_every_earlier_message_the_model_can_read(
        api, conversation, settings, whole_context_url):
    answer_tokens = 8  # the turns' notes make the length; the answers need only end
    settings.INFERENCE_URL, settings.CHAT_CONTEXT_TOKENS = whole_context_url, 0
    settings.CHAT_MAX_TOKENS, settings.CHAT_TEMPERATURE = answer_tokens, 0
    context = httpx2.get(f"{whole_context_url}/v1/models").json()["data"][0]["max_model_len"]
    url = f"/api/conversations/{conversation.pk}/messages"

    for turn in range(8):
        events = await read_events(await api.post(url, {"content": meeting_notes(turn, 1000)},
                                                  content_type="application/json"))
        generation = await sync_to_async(Generation.objects.get)(conversation=conversation, pk=events[0][1]["generation_id"])
        sent = await sync_to_async(prompt_of)(generation, [])

        assert names(events)[-1] == "done" and events[-1][1]["status"] in ("completed", "truncated")
        assert generation.prompt_messages == 2 * turn + 1 == len(sent)  # everything said so far
        assert events[0][1]["context_from_message_id"] is None
        assert generation.input_tokens == service_count(whole_context_url, sent)
        assert generation.input_tokens + answer_tokens <= context == 8192
    # The test's premise: past the old context of 2,048 (and the chat app's fallback for an
    # upstream that does not say its own), where the oldest messages would have dropped.
    assert generation.input_tokens > 2048


async def test_a_capped_context_keeps_the_newest_exchanges_that_fit_by_the_services_count(
        api, user, settings, whole_context_url):
    cap, answer_tokens = 512, 16  # a question and the exchange before it fit, not two
    settings.INFERENCE_URL, settings.CHAT_CONTEXT_TOKENS = whole_context_url, cap
    settings.CHAT_MAX_TOKENS, settings.CHAT_TEMPERATURE = answer_tokens, 0
    conversation = await sync_to_async(factories.conversation)(owner=user, system_prompt="Be brief.")
    system = [{"role": "system", "content": "Be brief."}]
    url = f"/api/conversations/{conversation.pk}/messages"

    for turn in range(6):
        length = 360 + 100 * (turn % 3)  # exchanges of different sizes (125-180 tokens), so that the cut moves
        events = await read_events(await api.post(url, {"content": meeting_notes(turn, length)},
                                                  content_type="application/json"))
        generation = await sync_to_async(Generation.objects.get)(pk=events[0][1]["generation_id"])
        sent = await sync_to_async(prompt_of)(generation, system)
        said = await sync_to_async(prompt_of)(
            Generation(conversation_id=conversation.pk, message_id=generation.message_id), system)

        assert names(events)[-1] == "done" and events[-1][1]["status"] in ("completed", "truncated")
        assert generation.input_tokens == service_count(whole_context_url, sent)
        assert generation.input_tokens + answer_tokens <= cap
        assert sent[1]["role"] == "user" and generation.prompt_messages == len(sent)
        if len(sent) < len(said):  # left out: the exchange before the first one read did not fit
            one_more = said[len(said) - len(sent) - 1:]  # ... and the exchange before (said[0] is the system)
            assert service_count(whole_context_url, system + one_more) + answer_tokens > cap
            assert events[0][1]["context_from_message_id"] == generation.context_from_message_id is not None
    assert len(sent) < len(said)  # the test's premise: old messages did drop


async def test_an_answer_nobody_comes_back_to_frees_the_models_sequence_soon_after_the_grace(
        api, conversation, user, settings, real_model_url):
    settings.INFERENCE_URL = real_model_url
    settings.CHAT_MAX_TOKENS = 1500  # far longer than the grace period and its margin take
    settings.CHAT_TEMPERATURE = 0
    settings.CHAT_RESUME_GRACE_SECONDS = grace_s = 2.0
    browser = Browser(api, f"/api/conversations/{conversation.pk}/messages")
    await browser.post({"content": "Tell me about the history of France."})
    await browser.read_until(deltas=2)
    left_at = time.monotonic()
    await browser.hang_up()

    async with httpx2.AsyncClient(base_url=real_model_url) as inference:
        async def running() -> float:
            return metric((await inference.get("/metrics")).text, "inference_running_sequences")

        assert await running() == 1  # the model goes on while nobody reads
        while await running() > 0 and time.monotonic() - left_at < grace_s + 10:
            await asyncio.sleep(0.05)
        freed_after = time.monotonic() - left_at

    def ended() -> Generation:
        waiting.wait_until(lambda: not Generation.objects.get(conversation=conversation).is_streaming, 10, "the final write")
        return Generation.objects.get(conversation=conversation)
    generation = await sync_to_async(ended)()
    # Not before the grace ends, and soon after it: within 3 s (a loaded 2-core machine took
    # 1.3 s once: the relay, the connection's close and the engine's next step share its cores).
    assert grace_s <= freed_after < grace_s + 3.0
    assert (generation.status, generation.cancelled_by) == ("stopped", "client_gone")
    assert generation.final_text.startswith(text_of(browser.events))
    assert len(generation.final_text) > len(text_of(browser.events))
    assert await sync_to_async(selectors.streams_open)(user=user) == 0


OTHER_MODEL = SECOND_MODEL_NAME  # served at second_model_url (tests/conftest.py)


async def test_two_conversations_side_by_side_are_each_answered_by_their_own_model_and_both_stop(
        api, user, settings, real_model_url, second_model_url):
    settings.INFERENCE_URL = f"{real_model_url},{second_model_url}"
    settings.CHAT_MAX_TOKENS = 200
    upstream_models.forget()
    first, second = await sync_to_async(lambda: [
        factories.conversation(owner=user), factories.conversation(owner=user, model=OTHER_MODEL)])()
    question = "Tell me about the history of France."
    before = [await sync_to_async(cancelled_on)(url) for url in (real_model_url, second_model_url)]

    ended = await stop_side_by_side(api, [first, second], question)

    after = [await sync_to_async(cancelled_on)(url) for url in (real_model_url, second_model_url)]
    generations = await sync_to_async(lambda: [Generation.objects.get(conversation=c) for c in (first, second)])()
    assert ended == [("SmolLM2-135M-Instruct", 202, "stopped"), (OTHER_MODEL, 202, "stopped")]
    assert [(g.model, g.status, g.cancelled_by) for g in generations] == [
        ("SmolLM2-135M-Instruct", "stopped", "user"), (OTHER_MODEL, "stopped", "user")]
    # Each service was asked one answer and freed it at its Stop.
    assert [a - b for a, b in zip(after, before)] == [1, 1]
