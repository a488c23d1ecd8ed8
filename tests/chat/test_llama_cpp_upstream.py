"""llama.cpp's server in place of ours, and beside ours: the relay speaks nothing but the OpenAI
protocol.

The same default model (the GGUF file our service loads, as it is) answers through
`llama-server`, built once from the pinned release (tests/llama_server.py). Each test holds a
behaviour the chat app shows with our service to the same account with llama.cpp's; the last
lists both upstreams, each serving a model name of its own.
"""

import httpx2
import pytest
from asgiref.sync import sync_to_async

from benchmarks.workload import meeting_notes
from chatapp.models import Conversation, Generation, Message
from chatapp.upstream import models as upstream_models
from chatapp.upstream import titles
from harness import waiting
from inference.engine import loader
from tests import factories
from tests.chat.streams import names, read_events, stop_after_deltas, stop_side_by_side, text_of
from tests.inference.serving import SECOND_MODEL_NAME, cancelled_on, metric
from tests.llama_server import llama_server

# The first test may wait for the build (about 10 minutes of both cores on a fresh machine).
pytestmark = [pytest.mark.slow, pytest.mark.llama_cpp, pytest.mark.process, pytest.mark.timeout(1500),
              pytest.mark.django_db(transaction=True)]

MAX_TOKENS = 40
LONG_ANSWER = 200  # about 5 s on one core


@pytest.fixture(scope="module")
def llama():
    with llama_server(loader.default_model_path(), loader.DEFAULT_MODEL_NAME) as server:
        yield server


@pytest.fixture
def upstream_is_llama(llama, settings):
    settings.INFERENCE_URL = llama.base_url
    settings.CHAT_MODEL = loader.DEFAULT_MODEL_NAME
    settings.CHAT_MAX_TOKENS = MAX_TOKENS
    settings.CHAT_TEMPERATURE = 0  # greedy, so that the answer is known
    return llama


async def ask(api, conversation, content: str) -> list:
    return await read_events(await api.post(f"/api/conversations/{conversation.pk}/messages",
                                            {"content": content}, content_type="application/json"))


def answered_turns(conversation, count: int) -> None:
    """`count` turns of meeting notes (about 560 tokens each) with short answers, stored as if
    answered: llama.cpp then reads only the last turn's prompt (asking every turn took 75 s of
    its one thread)."""
    for turn in range(count):
        factories.message(conversation, content=meeting_notes(turn, 2500))
        factories.message(conversation, role=Message.Role.ASSISTANT, status="completed",
                          content=f"Meeting {turn} went over the budget, hiring and the release.")


def generations_of(conversation) -> list[Generation]:
    return list(Generation.objects.filter(conversation=conversation).order_by("pk"))


def llama_metric(llama, name: str) -> float:
    return metric(httpx2.get(f"{llama.base_url}/metrics").text, f"llamacpp:{name}")


async def tokens_predicted(llama) -> float:
    """Every token it decoded, for answers ended or cancelled (counted as each slot is freed),
    once it works on nothing."""
    await sync_to_async(waiting.wait_until)(lambda: llama_metric(llama, "requests_processing") == 0, 30,
                                            "llama.cpp to be working on nothing")
    return llama_metric(llama, "tokens_predicted_total")


async def test_a_conversation_is_held_with_llama_cpps_server_as_the_upstream(
        api, conversation, upstream_is_llama):
    first = await ask(api, conversation, "What is the capital of France?")
    second = await ask(api, conversation, "And of Italy?")

    history = (await api.get(f"/api/conversations/{conversation.pk}/messages")).json()["results"]
    generations = await sync_to_async(generations_of)(conversation)
    for events, generation in zip((first, second), generations):
        assert names(events)[0] == "start" and names(events)[-1] == "done"
        assert names(events).count("delta") > 1  # streamed, not one answer at the end
        assert events[-1][1]["status"] == generation.status in ("completed", "truncated")
        assert text_of(events) == generation.final_text
        # llama.cpp's usage, counted by its own tokenizer
        assert generation.input_tokens > 0 and 0 < generation.output_tokens <= MAX_TOKENS
        assert generation.ttft_ms > 0 and generation.error_code == ""
    assert [m["role"] for m in history] == ["user", "assistant", "user", "assistant"]
    assert generations[1].prompt_messages == 3
    assert generations[1].input_tokens > generations[0].input_tokens  # the history went along


async def test_an_answer_cut_by_the_token_limit_is_truncated_and_continues_where_it_stopped(
        api, user, settings, upstream_is_llama):
    whole_conversation, cut_conversation = await sync_to_async(
        lambda: [factories.conversation(owner=user) for _ in range(2)])()
    question = "Tell me about the history of France."
    whole = await ask(api, whole_conversation, question)
    settings.CHAT_MAX_TOKENS = MAX_TOKENS // 2
    cut = await ask(api, cut_conversation, question)
    answer = await sync_to_async(Message.objects.get)(conversation=cut_conversation, role="assistant")

    continued = await read_events(await api.post(f"/api/messages/{answer.pk}/continue"))

    await sync_to_async(answer.refresh_from_db)()
    assert whole[-1][1]["status"] == "truncated"  # the 40 tokens end mid-answer, the test's premise
    assert cut[-1][1]["status"] == "truncated" and cut[-1][1]["finish_reason"] == "length"
    assert continued[-1][1]["status"] == "truncated"
    # Greedy: 20 tokens, then 20 more written on from the end of the first 20, are the 40.
    assert answer.content == text_of(cut) + text_of(continued) == text_of(whole)


async def test_a_stop_mid_answer_ends_llama_cpps_work_on_it(api, user, settings, upstream_is_llama):
    settings.CHAT_MAX_TOKENS = LONG_ANSWER
    finished, stopped = await sync_to_async(
        lambda: [factories.conversation(owner=user) for _ in range(2)])()
    question = "Tell me about the history of France."  # greedy, it goes on past LONG_ANSWER tokens
    before = await tokens_predicted(upstream_is_llama)
    done = (await ask(api, finished, question))[-1][1]
    predicted_whole = await tokens_predicted(upstream_is_llama) - before

    stop, _, after = await stop_after_deltas(api, stopped, deltas=2, seen_chars=1, content=question)
    predicted_cut = await tokens_predicted(upstream_is_llama) - before - predicted_whole

    cut = await sync_to_async(lambda: generations_of(stopped)[0])()
    assert done["status"] == "truncated" and predicted_whole == LONG_ANSWER  # what it does unstopped
    assert stop.status_code == 202 and after[-1][1]["status"] == "stopped"
    assert cut.status == "stopped" and cut.finish_reason == "cancelled" and cut.cancelled_by == "user"
    assert 2 <= predicted_cut < LONG_ANSWER  # it stopped when the relay hung up, not at the limit


def llama_count(llama, messages: list[dict]) -> int:
    """llama.cpp's own count of a prompt: its chat template, then its tokenizer."""
    prompt = httpx2.post(f"{llama.base_url}/apply-template", json={"messages": messages}).json()["prompt"]
    return len(httpx2.post(f"{llama.base_url}/tokenize", json={"content": prompt, "add_special": True}).json()["tokens"])


async def test_a_conversation_longer_than_llama_cpps_context_leaves_its_oldest_messages_out_by_its_count(
        api, conversation, settings, upstream_is_llama):
    settings.CHAT_CONTEXT_TOKENS = 0  # llama.cpp's slot says its own (2,048)
    n_ctx = httpx2.get(f"{upstream_is_llama.base_url}/props").json()["default_generation_settings"]["n_ctx"]
    await sync_to_async(answered_turns)(conversation, 3)
    events = await ask(api, conversation, meeting_notes(3, 2500))

    generation = await sync_to_async(lambda: generations_of(conversation)[-1])()
    sent = await sync_to_async(lambda: [
        {"role": m.role, "content": m.content} for m in Message.objects.filter(
            conversation=conversation, pk__gte=generation.context_from_message_id,
            pk__lt=generation.message_id).order_by("pk")])()
    assert events[-1][1]["status"] in ("completed", "truncated")  # answered, not refused
    assert events[0][1]["context_from_message_id"] == generation.context_from_message_id
    assert sent[0]["role"] == "user" and len(sent) == generation.prompt_messages < 7
    assert generation.input_tokens == llama_count(upstream_is_llama, sent)  # counted as llama.cpp does
    assert generation.input_tokens + MAX_TOKENS <= n_ctx == 2048


async def test_a_question_too_long_for_llama_cpps_context_is_refused_before_anything_is_stored(
        api, conversation, settings, upstream_is_llama):
    settings.CHAT_CONTEXT_TOKENS = 0
    settings.CHAT_MAX_MESSAGE_CHARS = 100_000
    question = " ".join(f"w{n}" for n in range(3000))  # over 2,048 tokens: one slot's context

    response = await api.post(f"/api/conversations/{conversation.pk}/messages", {"content": question},
                              content_type="application/json")

    assert response.status_code == 400 and response.json()["error"]["code"] == "context_too_long"
    assert await sync_to_async(Message.objects.filter(conversation=conversation).count)() == 0
    assert await sync_to_async(Generation.objects.filter(conversation=conversation).count)() == 0


def test_llama_cpp_names_a_conversation_after_its_first_answer(transactional_db, upstream_is_llama):
    conversation = factories.conversation(title="What is the capital of France?")
    factories.message(conversation, content="What is the capital of France?")
    factories.message(conversation, role="assistant", status="completed",
                      content="The capital of France is Paris.")

    title = titles.title_conversation(conversation.pk)

    assert title is not None and Conversation.objects.get(pk=conversation.pk).title == title


# Our service beside llama.cpp's: the same weights, served by ours under a name of its own
# (second_model_url, tests/conftest.py), so that INFERENCE_URL lists two upstreams serving two
# models (llama.cpp's is named by --alias).
OURS = SECOND_MODEL_NAME


async def test_ours_and_llama_cpps_each_answer_their_own_models_conversation_side_by_side_and_both_stop(
        api, user, settings, llama, second_model_url):
    settings.INFERENCE_URL = f"{second_model_url},{llama.base_url}"
    settings.CHAT_MODEL = loader.DEFAULT_MODEL_NAME
    settings.CHAT_MAX_TOKENS = LONG_ANSWER  # a cap the Stops come far before
    upstream_models.forget()
    offered = [entry["id"] for entry in (await api.get("/api/models")).json()["models"]]
    on_ours, on_llama = await sync_to_async(lambda: [
        factories.conversation(owner=user, model=OURS), factories.conversation(owner=user, model=llama.model_name)])()
    question = "Tell me about the history of France."
    cancelled_before = await sync_to_async(cancelled_on)(second_model_url)
    predicted_before = await tokens_predicted(llama)

    ended = await stop_side_by_side(api, [on_ours, on_llama], question)

    cancelled_by_ours = await sync_to_async(cancelled_on)(second_model_url) - cancelled_before
    predicted_by_llama = await tokens_predicted(llama) - predicted_before
    generations = await sync_to_async(lambda: [generations_of(c)[0] for c in (on_ours, on_llama)])()
    assert offered == [OURS, llama.model_name]  # what each upstream's /v1/models lists
    assert ended == [(OURS, 202, "stopped"), (llama.model_name, 202, "stopped")]
    assert [(g.model, g.status, g.cancelled_by) for g in generations] == [
        (OURS, "stopped", "user"), (llama.model_name, "stopped", "user")]
    # Ours was asked one answer (not llama.cpp's as well) and let it go at its Stop, its running
    # gauge back at 0; llama.cpp decoded the other and stopped when the relay hung up, far
    # before the cap, its slots idle again.
    assert cancelled_by_ours == 1
    assert 2 <= predicted_by_llama < LONG_ANSWER
