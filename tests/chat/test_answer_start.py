"""The start of an answer: refusals decided before anything goes upstream, then the upstream
request and the rows' write at the same time, and the first byte only once both are done."""

import asyncio
import threading

import pytest
from asgiref.sync import sync_to_async
from django.db import IntegrityError

from chatapp import services
from chatapp.models import Conversation, Generation, Message
from tests import factories
from tests.chat.start_races import ROW_LOCKS, another_answer_said, post, upstream_requested, user_row_locked
from tests.chat.streams import Browser, read_events, text_of

pytestmark = pytest.mark.django_db(transaction=True)


def rows() -> tuple[int, int, int]:
    return Conversation.objects.count(), Message.objects.count(), Generation.objects.count()


# --- refusals: decided from one read, before anything goes upstream ---
def busy(conversation):
    factories.message(conversation, role="assistant", status="streaming")


def at_the_stream_limit(conversation):
    factories.generation(factories.message(factories.conversation(owner=conversation.owner),
                                           role="assistant", status="streaming"))


def a_long_system_prompt(conversation):
    conversation.system_prompt = "blah " * 800  # within its 4,000 characters
    conversation.save()


def one_answer(conversation):
    factories.message(conversation, content="hi")
    return factories.message(conversation, role="assistant", content="Hello.")


REFUSALS = {
    "unknown_conversation": (lambda c: None, "/api/conversations/999999/messages", {"content": "hi"},
                             404, "not_found"),
    "empty_message": (lambda c: None, "/api/conversations/{c}/messages", {"content": " "},
                      400, "empty_message"),
    "context_too_long": (lambda c: None, "/api/conversations/{c}/messages", {"content": "blah " * 1500},
                         400, "context_too_long"),
    "system_prompt_too_long": (a_long_system_prompt, "/api/conversations/{c}/messages",
                               {"content": "hi"}, 400, "system_prompt_too_long"),
    "conversation_busy": (busy, "/api/conversations/{c}/messages", {"content": "hi"},
                          409, "conversation_busy"),
    "too_many_streams": (at_the_stream_limit, "/api/conversations/{c}/messages", {"content": "hi"},
                         429, "too_many_streams"),
    "nothing_to_regenerate": (lambda c: None, "/api/conversations/{c}/regenerate", {},
                              409, "nothing_to_regenerate"),
    "not_truncated": (one_answer, "/api/messages/{m}/continue", {}, 409, "not_truncated"),
    "not_a_user_message": (one_answer, "/api/messages/{m}/edit", {"content": "hi"},
                           409, "not_a_user_message"),
}


@pytest.mark.parametrize("case", REFUSALS)
async def test_a_refused_start_sends_nothing_upstream_and_stores_nothing(
        api, conversation, upstream, settings, case):
    settings.CHAT_MAX_STREAMS_PER_USER = 1
    settings.CHAT_CONTEXT_TOKENS, settings.CHAT_MAX_TOKENS = 1000, 100
    prepare, url, body, status, code = REFUSALS[case]
    made = await sync_to_async(prepare)(conversation)
    before = await sync_to_async(rows)()

    response = await post(api, url.format(c=conversation.pk, m=getattr(made, "pk", 0)), body)

    assert (response.status_code, response.json()["error"]["code"]) == (status, code)
    assert upstream.requests == []
    assert await sync_to_async(rows)() == before


# --- the upstream first, then the rows ---
@ROW_LOCKS
async def test_the_upstream_is_asked_before_the_rows_are_written_and_the_stream_waits_for_both(
        api, user, conversation, upstream):
    with user_row_locked(user) as release:
        sending = asyncio.ensure_future(post(api, f"/api/conversations/{conversation.pk}/messages",
                                             {"content": "hi"}))
        asked_before_the_write = await upstream_requested(upstream)
        generations_then = await sync_to_async(Generation.objects.count)()
        release.set()
        response = await sending

    events = await read_events(response)
    assert asked_before_the_write and generations_then == 0
    assert response.status_code == 200 and text_of(events) == "Hello, world!"


async def test_the_rows_are_committed_when_the_first_event_arrives(api, conversation, upstream):
    response = await post(api, f"/api/conversations/{conversation.pk}/messages", {"content": "hi"})

    first = await anext(response.streaming_content)
    answer = await sync_to_async(Message.objects.get)(conversation=conversation, role="assistant")
    generation = await sync_to_async(Generation.objects.get)(message=answer)
    await read_events(response)
    assert first.startswith(b"event: start")
    assert answer.status == "streaming" and generation.status == "streaming"
    assert str(generation.request_id) == upstream.requests[0][1]["x-request-id"]


def a_conversation_of_two_turns(conversation):
    for content in ("first question", "first answer", "second question", "second answer"):
        role = "assistant" if content.endswith("answer") else "user"
        factories.message(conversation, role=role, content=content)


def a_truncated_answer(conversation):
    factories.message(conversation, content="tell me everything")
    answer = factories.message(conversation, role="assistant", content="Everything begins",
                               status="truncated")
    factories.generation(answer, finish_reason="length", final_text="Everything begins")


# What the user asks of the conversation each time; the upstream refuses it before any stream.
STARTS = {
    "send": (a_conversation_of_two_turns, "/api/conversations/{c}/messages", {"content": "third"}),
    "edit": (a_conversation_of_two_turns, "/api/messages/{first}/edit", {"content": "rewritten"}),
    "regenerate": (a_conversation_of_two_turns, "/api/conversations/{c}/regenerate", {}),
    "continue": (a_truncated_answer, "/api/messages/{last}/continue", {}),
}


def messages_of(conversation) -> list[tuple[int, str, str, str]]:
    return list(Message.objects.filter(conversation=conversation).order_by("pk")
                .values_list("pk", "role", "content", "status"))


@pytest.mark.parametrize("start", STARTS)
async def test_an_upstream_refusal_leaves_the_conversation_as_it_was_and_a_failed_audit_row(
        api, conversation, upstream, start):
    prepare, url, body = STARTS[start]
    await sync_to_async(prepare)(conversation)
    before = await sync_to_async(messages_of)(conversation)
    upstream.script.status = 500

    response = await post(api, url.format(c=conversation.pk, first=before[0][0],
                                          last=before[-1][0]), body)

    refused = await sync_to_async(Generation.objects.get)(conversation=conversation,
                                                          status="failed")
    assert response.status_code == 502 and response.json()["error"]["code"] == "upstream_error"
    assert await sync_to_async(messages_of)(conversation) == before
    assert (refused.message_id, refused.finish_reason, refused.error_code) == (
        None, "error", "upstream_error")
    assert str(refused.request_id) == upstream.requests[0][1]["x-request-id"]


async def test_a_truncated_answer_whose_continuation_was_refused_can_still_be_continued(
        api, conversation, upstream):
    await sync_to_async(a_truncated_answer)(conversation)
    answer = await sync_to_async(Message.objects.get)(conversation=conversation, role="assistant")
    upstream.script.status = 500
    refused = await post(api, f"/api/messages/{answer.pk}/continue")
    upstream.script.status = 200

    continued = await post(api, f"/api/messages/{answer.pk}/continue")

    await read_events(continued)
    await sync_to_async(answer.refresh_from_db)()
    assert (refused.status_code, continued.status_code) == (502, 200)
    assert answer.content == "Everything beginsHello, world!"
    assert upstream.requests[-1][0]["messages"][-1]["content"] == "Everything begins"


# --- races and departures during the start ---
def deleted(conversation):
    services.conversation_delete(conversation=conversation)


@ROW_LOCKS
@pytest.mark.parametrize("rival, status, code", [(busy, 409, "conversation_busy"),
                                                 (another_answer_said, 409, "conversation_changed"),
                                                 (deleted, 404, "not_found")])
async def test_a_start_that_loses_the_race_for_its_conversation_closes_its_upstream_and_stores_nothing(
        api, user, conversation, upstream, rival, status, code):
    upstream.script.stall_after = 0
    with user_row_locked(user, before_commit=lambda: rival(conversation)) as release:
        sending = asyncio.ensure_future(post(api, f"/api/conversations/{conversation.pk}/messages",
                                             {"content": "hi"}))
        await upstream_requested(upstream)
        release.set()
        response = await sending
    hung_up = await asyncio.to_thread(upstream.hung_up.wait, 10)

    assert response.status_code == status and response.json()["error"]["code"] == code
    assert hung_up
    assert await sync_to_async(rows)() == (1, 0 if rival is deleted else 1, 0)  # the rival's rows alone


@ROW_LOCKS
async def test_a_start_whose_write_fails_closes_its_upstream_and_raises(api, user, conversation, upstream):
    upstream.script.stall_after = 0
    taken = []  # the request id, taken by a rival row before our write makes its own

    def take_the_request_id():
        elsewhere = factories.conversation(owner=user)
        factories.generation(factories.message(elsewhere, role="assistant"), status="completed",
                             request_id=taken[0])

    with user_row_locked(user, before_commit=take_the_request_id) as release:
        sending = asyncio.ensure_future(post(api, f"/api/conversations/{conversation.pk}/messages",
                                             {"content": "hi"}))
        await upstream_requested(upstream)
        taken.append(upstream.requests[0][1]["x-request-id"])
        release.set()
        with pytest.raises(IntegrityError):  # a 500 in production
            await sending
    hung_up = await asyncio.to_thread(upstream.hung_up.wait, 10)

    assert hung_up
    assert await sync_to_async(rows)() == (2, 1, 1)  # the rival's rows alone


async def test_of_two_sends_at_once_to_one_conversation_one_streams_and_the_other_gets_409(
        api, conversation, upstream):
    url = f"/api/conversations/{conversation.pk}/messages"

    first, second = await asyncio.gather(post(api, url, {"content": "a"}), post(api, url, {"content": "b"}))
    streamed = first if first.status_code == 200 else second
    events = await read_events(streamed)

    statuses = sorted([first.status_code, second.status_code])
    messages = await sync_to_async(list)(Message.objects.filter(conversation=conversation))
    assert statuses == [200, 409]
    assert text_of(events) == "Hello, world!"
    assert [(m.role, m.status) for m in messages] == [("user", "completed"), ("assistant", "completed")]
    assert await sync_to_async(Generation.objects.count)() == 1


@ROW_LOCKS
async def test_a_browser_that_leaves_during_the_start_closes_the_upstream_and_ends_the_row(
        api, user, conversation, upstream):
    upstream.script.stall_after = 0
    browser = Browser(api, f"/api/conversations/{conversation.pk}/messages")
    with user_row_locked(user) as release:
        await browser.send({"content": "hi"})
        await upstream_requested(upstream)
        await browser.app.send_input({"type": "http.disconnect"})
        hung_up = await asyncio.to_thread(upstream.hung_up.wait, 10)
        release.set()
        await browser.app.wait(timeout=10)

    answer = await sync_to_async(Message.objects.get)(conversation=conversation, role="assistant")
    generation = await sync_to_async(Generation.objects.get)(message=answer)
    assert hung_up
    assert answer.status == "stopped"
    assert generation.finish_reason == "cancelled" and generation.cancelled_by == "client_gone"


async def test_a_browser_that_leaves_before_the_upstream_answered_leaves_an_audit_row_only(
        api, conversation, upstream):
    upstream.script.head_held = threading.Event()
    browser = Browser(api, f"/api/conversations/{conversation.pk}/messages")
    try:
        await browser.send({"content": "hi"})
        await upstream_requested(upstream)
        await browser.app.send_input({"type": "http.disconnect"})
        await browser.app.wait(timeout=10)
    finally:
        upstream.script.head_held.set()

    generation = await sync_to_async(Generation.objects.get)(conversation=conversation)
    assert await sync_to_async(Message.objects.filter(conversation=conversation).count)() == 0
    assert (generation.message_id, generation.status, generation.cancelled_by) == (
        None, "stopped", "client_gone")


@pytest.mark.parametrize("system_prompt, message, code", [
    ("x" * 3000, "hi", "system_prompt_too_long"),
    ("Be brief.", "x" * 3000, "context_too_long"),
])
async def test_a_prompt_too_long_for_the_context_names_its_greater_part_as_the_upstream_counts_it(
        api, conversation, upstream, settings, system_prompt, message, code):
    settings.CHAT_CONTEXT_TOKENS, settings.CHAT_MAX_TOKENS = 2000, 100
    upstream.script.counts_every_byte = True  # a token a byte: 3,000 characters do not fit
    conversation.system_prompt = system_prompt
    await sync_to_async(conversation.save)()

    response = await post(api, f"/api/conversations/{conversation.pk}/messages",
                          {"content": message})

    assert (response.status_code, response.json()["error"]["code"]) == (400, code)
    assert upstream.requests == []
