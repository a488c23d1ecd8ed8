"""The JSON API: conversations, messages and their flows, scoped to their owner, with clear errors."""

import json

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient, Client
from django.utils import timezone

from chatapp.models import Conversation, Generation, Message
from tests import factories
from tests.chat.streams import read_events, text_of

pytestmark = pytest.mark.django_db(transaction=True)


async def post(client, url, body=None):
    return await client.post(url, json.dumps(body or {}), content_type="application/json")


def count_rows() -> tuple[int, int, int]:
    return Conversation.objects.count(), Message.objects.count(), Generation.objects.count()


# --- sign in ---
def test_sign_in_and_out_with_csrf_enforced(user):
    client = Client(enforce_csrf_checks=True)
    client.get("/api/auth/session")
    token = client.cookies["csrftoken"].value

    refused = client.post("/api/auth/login", {"username": user.username, "password": "a-long-test-password"},
                          content_type="application/json")
    wrong = client.post("/api/auth/login", {"username": user.username, "password": "nope"},
                        content_type="application/json", headers={"X-CSRFToken": token})
    signed_in = client.post("/api/auth/login", {"username": user.username, "password": "a-long-test-password"},
                            content_type="application/json", headers={"X-CSRFToken": token})
    session = client.get("/api/auth/session").json()
    token = client.cookies["csrftoken"].value  # rotated at sign-in
    client.post("/api/auth/logout", headers={"X-CSRFToken": token})

    assert refused.status_code == 403
    assert wrong.status_code == 400 and wrong.json()["error"]["code"] == "invalid_credentials"
    assert signed_in.json()["user"]["username"] == user.username
    assert session["user"]["id"] == user.pk
    assert client.get("/api/auth/session").json()["user"] is None


def test_the_session_tells_the_page_how_long_a_message_and_a_title_may_be_signed_in_or_not(user, settings):
    settings.CHAT_MAX_MESSAGE_CHARS = 1234
    client = Client()
    anonymous = client.get("/api/auth/session").json()
    client.force_login(user)
    signed_in = client.get("/api/auth/session").json()

    assert anonymous["limits"] == {"max_message_chars": 1234, "max_title_chars": 200}
    assert signed_in["limits"] == {"max_message_chars": 1234, "max_title_chars": 200}


async def test_anonymous_requests_get_401():
    response = await AsyncClient().get("/api/conversations")

    assert response.status_code == 401 and response.json()["error"]["code"] == "not_authenticated"


# --- conversations ---
async def test_conversations_are_created_renamed_listed_newest_first_and_deleted(api):
    first = (await post(api, "/api/conversations", {"title": "First"})).json()
    second = (await post(api, "/api/conversations", {"system_prompt": "Be brief."})).json()
    renamed = await api.patch(f"/api/conversations/{first['id']}", {"title": "Renamed"},
                              content_type="application/json")

    listed = (await api.get("/api/conversations")).json()
    deleted = await api.delete(f"/api/conversations/{second['id']}")
    after = (await api.get("/api/conversations")).json()

    assert renamed.json()["title"] == "Renamed"
    assert [c["id"] for c in listed["results"]] == [first["id"], second["id"]]
    assert deleted.status_code == 204
    assert "Content-Length" not in deleted.headers and deleted.content == b""  # RFC 9110, 8.6
    assert [c["id"] for c in after["results"]] == [first["id"]]
    assert await sync_to_async(Conversation.objects.filter(pk=second["id"]).exists)()  # soft delete


async def test_a_title_is_kept_on_one_line_and_one_over_200_characters_is_refused(api):
    created = (await post(api, "/api/conversations", {"title": "  Trip\nto\t\tLisbon \r\n"})).json()
    too_long = await api.patch(f"/api/conversations/{created['id']}", {"title": "x" * 201},
                               content_type="application/json")

    assert created["title"] == "Trip to Lisbon"
    assert too_long.status_code == 400 and too_long.json()["error"]["code"] == "title_too_long"
    assert (await api.get(f"/api/conversations/{created['id']}")).json()["title"] == "Trip to Lisbon"


# A bell, a terminal's escape, a right-to-left override that shows "play" as "yalp", zero-width
# spaces; a family emoji's joiners and a Persian word's non-joiner are part of what they say.
HIDDEN = "Bank\u0007\u001b[2J \u202eyalp\u202c\u200b\u200b\ufeffnotes"
KEPT = "\U0001F468\u200d\U0001F469\u200d\U0001F467 \u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"


async def test_a_title_keeps_no_control_or_invisible_formatting_characters_but_joiners(
        api, user, upstream):
    created = (await post(api, "/api/conversations", {"title": HIDDEN})).json()
    kept = (await post(api, "/api/conversations", {"title": KEPT})).json()
    conversation = await sync_to_async(factories.conversation)(owner=user)
    await read_events(await post(api, f"/api/conversations/{conversation.pk}/messages",
                                 {"content": f"{HIDDEN}\nthe rest"}))

    first_line = (await api.get(f"/api/conversations/{conversation.pk}")).json()["title"]
    assert created["title"] == first_line == "Bank[2J yalpnotes"
    assert kept["title"] == KEPT


async def test_conversations_are_paged_and_searchable_by_title_and_content(api, user):
    def make():
        for i in range(25):
            factories.conversation(owner=user, title=f"Chat {i}")
        talk = factories.conversation(owner=user, title="Recipes")
        factories.message(talk, content="How do I bake sourdough bread?")
    await sync_to_async(make)()

    page_one = (await api.get("/api/conversations")).json()
    page_two = (await api.get("/api/conversations", {"after": page_one["next"]})).json()
    by_content = (await api.get("/api/conversations", {"q": "sourdough"})).json()
    by_title = (await api.get("/api/conversations", {"q": "recipes"})).json()

    assert (len(page_one["results"]), len(page_two["results"])) == (20, 6)
    assert page_two["next"] is None
    assert [c["title"] for c in by_content["results"]] == ["Recipes"]
    assert [c["title"] for c in by_title["results"]] == ["Recipes"]


# --- isolation ---
async def test_another_users_objects_answer_404_on_every_endpoint_and_stay_untouched(api, other_user, upstream):
    def theirs():
        conversation = factories.conversation(owner=other_user, title="Private")
        question = factories.message(conversation, content="secret")
        answer = factories.message(conversation, role="assistant", content="answer", status="truncated")
        return conversation, question, answer, factories.generation(answer)
    conversation, question, answer, generation = await sync_to_async(theirs)()
    before = await sync_to_async(count_rows)()

    responses = [
        await api.get(f"/api/conversations/{conversation.pk}"),
        await api.patch(f"/api/conversations/{conversation.pk}", {"title": "x"}, content_type="application/json"),
        await api.delete(f"/api/conversations/{conversation.pk}"),
        await api.get(f"/api/conversations/{conversation.pk}/messages"),
        await post(api, f"/api/conversations/{conversation.pk}/messages", {"content": "hi"}),
        await post(api, f"/api/conversations/{conversation.pk}/regenerate"),
        await post(api, f"/api/messages/{question.pk}/edit", {"content": "hi"}),
        await post(api, f"/api/messages/{answer.pk}/continue"),
        await api.get(f"/api/generations/{generation.pk}"),
        await post(api, f"/api/generations/{generation.pk}/stop", {"seen_chars": 0}),
    ]
    listed = (await api.get("/api/conversations", {"q": "secret"})).json()

    assert [r.status_code for r in responses] == [404] * len(responses)
    assert all("secret" not in r.content.decode() and "Private" not in r.content.decode() for r in responses)
    assert listed["results"] == []
    assert await sync_to_async(count_rows)() == before
    assert upstream.requests == []


async def test_a_deleted_conversations_answers_answer_404_as_the_rest_of_it(api, user):
    """Its messages, edit and continue answered 404, but its answers' text was still read here."""
    def deleted():
        conversation = factories.conversation(owner=user, title="Gone")
        answer = factories.message(conversation, role="assistant", content="the answer's text")
        generation = factories.generation(answer, finish_reason="stop", final_text="the answer's text")
        conversation.deleted_at = timezone.now()
        conversation.save()
        return generation
    generation = await sync_to_async(deleted)()

    responses = [await api.get(f"/api/generations/{generation.pk}"),
                 await api.get(f"/api/generations/{generation.pk}/events"),
                 await post(api, f"/api/generations/{generation.pk}/stop", {"seen_chars": 0})]

    assert [r.status_code for r in responses] == [404] * len(responses)
    assert all("answer's text" not in r.content.decode() for r in responses)


# --- refusals before the stream ---
@pytest.mark.parametrize("body, status, code", [
    ({"content": ""}, 400, "empty_message"),
    ({"content": "   "}, 400, "empty_message"),
    ({"content": "\u200b"}, 400, "empty_message"),  # a zero-width space: nothing to read
    ({"content": "\ufeff\x1c\n"}, 400, "empty_message"),
    ({}, 400, "empty_message"),
    ({"content": 42}, 400, "invalid_value"),
    ({"content": None}, 400, "invalid_value"),
    ({"content": "x" * 8001}, 400, "message_too_long"),
    ("{not json", 400, "invalid_json"),
])
async def test_a_bad_message_is_refused_before_any_stream_and_stores_nothing(
        api, conversation, upstream, body, status, code):
    before = await sync_to_async(count_rows)()
    content = body if isinstance(body, str) else json.dumps(body)

    response = await api.post(f"/api/conversations/{conversation.pk}/messages", content,
                              content_type="application/json")

    assert response.status_code == status
    assert response.json()["error"]["code"] == code
    assert await sync_to_async(count_rows)() == before
    assert upstream.requests == []


async def test_an_unknown_conversation_is_404(api, upstream):
    response = await post(api, "/api/conversations/999999/messages", {"content": "hi"})

    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"


async def test_a_second_stream_beyond_the_per_user_limit_is_429_and_stores_nothing(
        api, user, upstream, settings):
    settings.CHAT_MAX_STREAMS_PER_USER = 1
    upstream.script.stall_after = 1
    first_conversation, second_conversation = await sync_to_async(
        lambda: (factories.conversation(owner=user), factories.conversation(owner=user)))()
    streaming = await post(api, f"/api/conversations/{first_conversation.pk}/messages", {"content": "a"})
    before = await sync_to_async(count_rows)()

    refused = await post(api, f"/api/conversations/{second_conversation.pk}/messages", {"content": "b"})

    assert streaming.status_code == 200
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "too_many_streams"
    assert refused["Retry-After"] == "5"  # a slot comes free when an answer ends: nobody knows when
    assert await sync_to_async(count_rows)() == before
    await streaming.streaming_content.aclose()


async def test_a_conversation_with_an_answer_streaming_refuses_another_with_409(api, conversation, upstream):
    upstream.script.stall_after = 1
    streaming = await post(api, f"/api/conversations/{conversation.pk}/messages", {"content": "a"})

    refused = await post(api, f"/api/conversations/{conversation.pk}/messages", {"content": "b"})

    assert refused.status_code == 409 and refused.json()["error"]["code"] == "conversation_busy"
    await streaming.streaming_content.aclose()


# --- flows ---
async def test_regenerate_replaces_the_last_answer_and_keeps_the_old_audit_row(api, conversation, upstream):
    await read_events(await post(api, f"/api/conversations/{conversation.pk}/messages", {"content": "hi"}))
    upstream.script.chunks = ["Another", " answer"]

    events = await read_events(await post(api, f"/api/conversations/{conversation.pk}/regenerate"))

    listed = (await api.get(f"/api/conversations/{conversation.pk}/messages")).json()["results"]
    generations = await sync_to_async(list)(Generation.objects.filter(conversation=conversation).order_by("pk"))
    assert text_of(events) == "Another answer"
    assert [(m["role"], m["content"]) for m in listed] == [("user", "hi"), ("assistant", "Another answer")]
    assert [g.final_text for g in generations] == ["Hello, world!", "Another answer"]
    assert generations[0].message_id is None


async def test_editing_a_message_replaces_everything_after_it(api, conversation, upstream):
    url = f"/api/conversations/{conversation.pk}/messages"
    await read_events(await post(api, url, {"content": "first question"}))
    await read_events(await post(api, url, {"content": "second question"}))
    first = (await api.get(url)).json()["results"][0]

    await read_events(await post(api, f"/api/messages/{first['id']}/edit", {"content": "better question"}))

    listed = (await api.get(url)).json()["results"]
    assert [(m["role"], m["content"]) for m in listed] == [("user", "better question"),
                                                          ("assistant", "Hello, world!")]
    assert upstream.requests[-1][0]["messages"] == [{"role": "user", "content": "better question"}]


async def test_a_truncated_answer_can_be_continued_and_only_that(api, conversation, upstream):
    url = f"/api/conversations/{conversation.pk}/messages"
    upstream.script.finish_reason = "length"
    await read_events(await post(api, url, {"content": "tell me"}))
    answer = (await api.get(url)).json()["results"][-1]
    upstream.script.finish_reason = "stop"
    upstream.script.chunks = [" and", " more."]

    events = await read_events(await post(api, f"/api/messages/{answer['id']}/continue"))
    again = await post(api, f"/api/messages/{answer['id']}/continue")

    continued = (await api.get(url)).json()["results"][-1]
    assert answer["status"] == "truncated"
    assert text_of(events) == " and more."
    assert continued["content"] == "Hello, world! and more." and continued["status"] == "completed"
    # Listed with its latest generation, the continuation's, as the page follows it after a reload.
    assert (answer["generation"]["finish_reason"], continued["generation"]["finish_reason"]) == (
        "length", "stop")
    assert upstream.requests[-1][0]["continue_final_message"] is True
    assert upstream.requests[-1][0]["add_generation_prompt"] is False  # as vLLM and llama.cpp require
    assert upstream.requests[-1][0]["messages"][-1] == {"role": "assistant", "content": "Hello, world!"}
    assert again.status_code == 409 and again.json()["error"]["code"] == "not_truncated"


async def test_a_continuation_that_fails_midway_fails_alone_and_its_answer_can_be_continued_again(
        api, conversation, upstream):
    url = f"/api/conversations/{conversation.pk}/messages"
    upstream.script.finish_reason = "length"
    await read_events(await post(api, url, {"content": "tell me"}))
    answer = (await api.get(url)).json()["results"][-1]
    upstream.script.finish_reason = "stop"
    upstream.script.chunks, upstream.script.error_after = [" and", " more", " lost"], 2

    failed = await read_events(await post(api, f"/api/messages/{answer['id']}/continue"))
    after_failure = (await api.get(url)).json()["results"][-1]
    upstream.script.chunks, upstream.script.error_after = [" at last."], None
    await read_events(await post(api, f"/api/messages/{answer['id']}/continue"))
    continued_from = upstream.requests[-1][0]["messages"][-1]
    await read_events(await post(api, url, {"content": "and then?"}))

    done = dict(failed)["done"]
    assert text_of(failed) == " and more"
    assert (done["status"], done["finish_reason"], done["message_status"]) == (
        "failed", "error", "truncated")
    # What the user saw of the answer stays, continuable, and part of what the model reads.
    assert (after_failure["content"], after_failure["status"]) == ("Hello, world! and more", "truncated")
    assert after_failure["generation"]["status"] == "failed"
    assert continued_from == {"role": "assistant", "content": "Hello, world! and more"}
    assert upstream.requests[-1][0]["messages"][-2] == {
        "role": "assistant", "content": "Hello, world! and more at last."}


async def test_the_system_prompt_leads_and_old_messages_give_way_to_the_context(api, user, upstream, settings):
    settings.CHAT_CONTEXT_TOKENS = 600
    settings.CHAT_MAX_TOKENS = 100
    conversation = await sync_to_async(factories.conversation)(owner=user, system_prompt="Be brief.")
    url = f"/api/conversations/{conversation.pk}/messages"
    for i in range(6):
        await read_events(await post(api, url, {"content": f"question {i} " + "blah " * 60}))

    sent = upstream.requests[-1][0]["messages"]
    assert sent[0] == {"role": "system", "content": "Be brief."}
    assert sent[-1]["content"].startswith("question 5")
    assert len(sent) < 12  # the oldest turns were left out


def test_the_list_names_each_conversations_answer_being_written(client, user):
    writing, stopping, quiet = (factories.conversation(owner=user, title=t) for t in ("w", "s", "q"))
    live = factories.generation(factories.message(writing, role="assistant", status="streaming"))
    asked = factories.generation(factories.message(stopping, role="assistant", status="streaming"),
                                 status="stop_requested")
    factories.generation(factories.message(quiet, role="assistant"), finish_reason="stop")
    client.force_login(user)

    listed = {c["title"]: c["live_generation_id"] for c in client.get("/api/conversations").json()["results"]}

    assert listed == {"w": live.pk, "s": asked.pk, "q": None}
