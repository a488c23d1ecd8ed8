"""The prompt fits the upstream's context, counted by the upstream, and the user is told what
the model no longer reads.

The stand-in upstream injects what the real service cannot be made to do: a missing /tokenize
(TGI's case), a context it says, and a tokenizer far denser than any estimate. The real model's
counts are held in tests/chat/test_real_model.py, llama.cpp's in test_llama_cpp_upstream.py.
"""

import pytest
from asgiref.sync import sync_to_async

from chatapp.models import Generation
from chatapp.upstream import inference_replicas, token_counts
from tests import factories
from tests.chat.streams import read_events
from tests.fakes.upstream import DEFAULT_MODEL

pytestmark = pytest.mark.django_db(transaction=True)


async def ask(api, conversation, content: str) -> list:
    return await read_events(await api.post(f"/api/conversations/{conversation.pk}/messages",
                                            {"content": content}, content_type="application/json"))


def dense_count(messages: list[dict]) -> int:
    """What the stand-in's /tokenize answers (counts_every_byte)."""
    return sum(len(m["content"].encode()) + 5 for m in messages) + 3


def start_of(events) -> dict:
    return next(payload for name, payload in events if name == "start")


async def test_an_upstream_without_a_tokenize_endpoint_is_asked_once_and_the_estimate_fits_after(
        api, conversation, upstream, settings):
    settings.CHAT_CONTEXT_TOKENS, settings.CHAT_MAX_TOKENS = 600, 100
    for i in range(4):
        await ask(api, conversation, f"question {i} " + "blah " * 100)

    assert len(upstream.counts) == 1  # its 404 is remembered
    sent = upstream.requests[-1][0]["messages"]
    assert sent[-1]["content"].startswith("question 3") and len(sent) < 7


# (the context the upstream says, CHAT_CONTEXT_TOKENS, characters a question, all 7 messages sent)
CONTEXTS = {
    "the upstream's large context holds what the old 2,048 could not": (100_000, 0, 3000, True),
    "the upstream's small context leaves old messages out": (600, 0, 500, False),
    "the setting caps the upstream's context": (100_000, 600, 500, False),
}


@pytest.mark.parametrize("case", CONTEXTS)
async def test_the_context_is_the_upstreams_unless_the_setting_caps_it(api, conversation, upstream, settings, case):
    upstream.script.context_tokens, settings.CHAT_CONTEXT_TOKENS, chars, whole = CONTEXTS[case]
    settings.CHAT_MAX_TOKENS = 100
    for i in range(4):
        await ask(api, conversation, f"question {i} " + "blah " * (chars // 5))

    assert (len(upstream.requests[-1][0]["messages"]) == 7) is whole


async def test_each_prompt_holds_every_earlier_exchange_that_fits_counted_by_the_upstream(
        api, conversation, upstream, settings):
    # A token per byte: the estimate (three bytes a token) falls far short of every count.
    upstream.script.context_tokens, upstream.script.counts_every_byte = 1000, True
    settings.CHAT_CONTEXT_TOKENS, settings.CHAT_MAX_TOKENS = 0, 200
    history: list[dict] = []
    for i in range(8):
        question = f"question {i} " + "note " * (20 + 9 * i)
        events = await ask(api, conversation, question)
        history += [{"role": "user", "content": question}, {"role": "assistant", "content": "Hello, world!"}]

        sent, asked = upstream.requests[-1][0]["messages"], upstream.requests[-1][0]["max_tokens"]
        said = history[:-1]  # but this answer
        assert events[-1][1]["status"] == "completed"
        assert sent == said[len(said) - len(sent):] and sent[0]["role"] == "user"
        assert dense_count(sent) + asked <= 1000 and asked == 200
        if len(sent) < len(said):  # the exchange before would not have fitted
            assert dense_count(said[len(said) - len(sent) - 2:]) + 200 > 1000
    assert len(sent) < len(history) - 1  # the test's premise: old messages did drop


async def test_one_count_an_answer_and_only_of_what_is_new_while_nothing_was_left_out(
        api, conversation, upstream, settings):
    upstream.script.context_tokens, upstream.script.counts_every_byte = 100_000, True
    settings.CHAT_CONTEXT_TOKENS = 0
    counted_per_answer = []
    for i in range(4):
        before = len(upstream.counts)
        await ask(api, conversation, f"question {i} " + "note " * 100)
        counted_per_answer.append(upstream.counts[before:])

    # The second answer also learns, once for this upstream, what its template adds up to.
    assert [len(counts) for counts in counted_per_answer] == [1, 7, 1, 1]
    assert [len(counts[-1]["messages"]) for counts in counted_per_answer] == [1, 2, 2, 2]
    assert counted_per_answer[-1][-1]["messages"][-1]["content"].startswith("question 3")


async def test_a_question_that_leaves_less_room_than_asked_gets_a_shorter_answer_not_a_400(
        api, conversation, upstream, settings):
    upstream.script.context_tokens, upstream.script.counts_every_byte = 1000, True
    settings.CHAT_CONTEXT_TOKENS, settings.CHAT_MAX_TOKENS = 0, 500
    question = "x" * 700

    events = await ask(api, conversation, question)

    sent = upstream.requests[-1][0]
    assert events[-1][1]["status"] == "completed"
    assert sent["max_tokens"] == 1000 - dense_count(sent["messages"]) == 1000 - 708


async def test_a_question_the_model_cannot_read_is_refused_before_anything_is_stored(
        api, conversation, upstream, settings):
    upstream.script.context_tokens, upstream.script.counts_every_byte = 1000, True
    settings.CHAT_CONTEXT_TOKENS = 0

    response = await api.post(f"/api/conversations/{conversation.pk}/messages", {"content": "x" * 1000},
                              content_type="application/json")

    assert response.status_code == 400 and response.json()["error"]["code"] == "context_too_long"
    assert upstream.requests == [] and await sync_to_async(Generation.objects.count)() == 0


async def test_a_continued_answer_is_read_with_its_question_never_alone(api, conversation, upstream, settings):
    # Found on the real stack (context 1024): a question of 1,000 tokens got 24 tokens of answer,
    # cut by the room left; Continue then sent the answer alone, its question left out, and the
    # model wrote 512 tokens on without knowing what it answered.
    upstream.script.context_tokens, upstream.script.counts_every_byte = 1000, True
    settings.CHAT_CONTEXT_TOKENS, settings.CHAT_MAX_TOKENS = 0, 500
    upstream.script.finish_reason = "length"
    await ask(api, conversation, "x" * 600)  # 608 tokens: room for 392, asked 500
    answer = (await api.get(f"/api/conversations/{conversation.pk}/messages")).json()["results"][-1]
    assert answer["status"] == "truncated"

    events = await read_events(await api.post(f"/api/messages/{answer['id']}/continue"))

    sent = upstream.requests[-1][0]
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant"]
    assert start_of(events)["context_from_message_id"] is None
    assert sent["max_tokens"] == 1000 - dense_count(sent["messages"])


async def test_a_continuation_whose_question_and_answer_fill_the_context_is_refused_as_such_before_anything_is_stored(
        api, conversation, upstream, settings):
    upstream.script.context_tokens, upstream.script.counts_every_byte = 1000, True
    settings.CHAT_CONTEXT_TOKENS, settings.CHAT_MAX_TOKENS = 0, 500
    upstream.script.finish_reason, upstream.script.chunks = "length", ["y" * 392]
    await ask(api, conversation, "x" * 600)  # 605 + 397 + 3: the exchange alone is past 1000
    answer = (await api.get(f"/api/conversations/{conversation.pk}/messages")).json()["results"][-1]
    asked = len(upstream.requests)

    response = await api.post(f"/api/messages/{answer['id']}/continue")

    assert response.status_code == 400 and response.json()["error"]["code"] == "no_room_to_continue"
    assert len(upstream.requests) == asked
    after = (await api.get(f"/api/conversations/{conversation.pk}/messages")).json()["results"][-1]
    assert (after["content"], after["status"]) == (answer["content"], "truncated")


async def test_the_first_message_the_model_reads_is_named_in_the_start_the_audit_and_the_history(
        api, conversation, upstream, settings):
    upstream.script.context_tokens, upstream.script.counts_every_byte = 700, True
    settings.CHAT_CONTEXT_TOKENS, settings.CHAT_MAX_TOKENS = 0, 100
    firsts = [start_of(await ask(api, conversation, f"question {i} " + "note " * 40))["context_from_message_id"]
              for i in range(4)]

    listed = (await api.get(f"/api/conversations/{conversation.pk}/messages")).json()["results"]
    generations = await sync_to_async(list)(Generation.objects.filter(conversation=conversation).order_by("pk"))
    by_id = {m["id"]: m for m in listed}
    sent = upstream.requests[-1][0]["messages"]
    assert firsts[0] is None  # the whole conversation fitted
    assert firsts[-1] is not None and by_id[firsts[-1]]["content"] == sent[0]["content"]
    assert by_id[firsts[-1]]["role"] == "user"
    assert [g.context_from_message_id for g in generations] == firsts
    assert listed[-1]["generation"]["context_from_message_id"] == firsts[-1]
    assert listed[1]["generation"]["context_from_message_id"] is None


async def test_the_system_prompt_stays_when_older_messages_go(api, user, upstream, settings):
    upstream.script.context_tokens, upstream.script.counts_every_byte = 700, True
    settings.CHAT_CONTEXT_TOKENS, settings.CHAT_MAX_TOKENS = 0, 100
    conversation = await sync_to_async(factories.conversation)(owner=user, system_prompt="Be brief.")
    for i in range(4):
        await ask(api, conversation, f"question {i} " + "note " * 40)

    sent = upstream.requests[-1][0]["messages"]
    assert sent[0] == {"role": "system", "content": "Be brief."}
    assert sent[-1]["content"].startswith("question 3") and len(sent) < 8
    assert dense_count(sent) + 100 <= 700


async def test_a_replica_that_lately_refused_is_not_the_one_asked_to_count(api, conversation, upstream, settings):
    upstream.script.context_tokens, upstream.script.counts_every_byte = 1000, True
    settings.CHAT_CONTEXT_TOKENS = 0
    settings.INFERENCE_URL = f"http://127.0.0.1:9,{settings.INFERENCE_URL}"  # nothing listens on port 9

    first = await ask(api, conversation, "question 0")
    counted_then = len(upstream.counts)
    second = await ask(api, conversation, "question 1")

    assert first[-1][1]["status"] == second[-1][1]["status"] == "completed"
    assert counted_then == 0  # the first answer asked the dead replica, and estimated
    assert len(upstream.counts) == 1


async def test_a_replica_that_cannot_be_reached_to_count_is_not_asked_to_count_again(upstream, settings):
    # Only the count meets the dead replica here: no stream and no /metrics poll marks it.
    settings.INFERENCE_URL = f"http://127.0.0.1:9,{settings.INFERENCE_URL}"  # nothing listens on port 9
    dead = inference_replicas.first_answering_url(DEFAULT_MODEL)
    assert dead == "http://127.0.0.1:9"
    assert await token_counts.prompt_tokens(dead, DEFAULT_MODEL, [{"role": "user", "content": "Hi"}]) is None
    assert inference_replicas.first_answering_url(DEFAULT_MODEL) != dead
