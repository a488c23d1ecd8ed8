"""A conversation over the API, answered by the real inference service with the default model."""

import pytest
from asgiref.sync import sync_to_async

from chatapp.models import Generation
from tests import factories
from tests.chat.streams import names, read_events, stop_after_deltas, text_of
from tests.inference.serving import real_model_serving

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def real_inference_url():
    with real_model_serving(max_running=4) as url:
        yield url


async def test_a_signed_in_user_holds_a_conversation_with_streamed_answers(
        api, conversation, settings, real_inference_url):
    settings.INFERENCE_URL = real_inference_url
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
        api, user, settings, real_inference_url):
    settings.INFERENCE_URL = real_inference_url
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
