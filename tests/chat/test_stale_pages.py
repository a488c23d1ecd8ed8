"""A page that has not seen what another tab or device wrote destroys none of it: a Regenerate or
an edit names the last message the page shows and its length as read, and the server refuses one
whose conversation has moved on since (409 conversation_changed), or written on in that message."""

import pytest

from tests.chat.streams import read_events
from tests.chat.test_api import post

pytestmark = pytest.mark.django_db(transaction=True)


async def test_regenerate_and_edit_refuse_a_page_that_has_not_seen_the_conversations_last_message(
        api, conversation, upstream):
    url = f"/api/conversations/{conversation.pk}/messages"
    await read_events(await post(api, url, {"content": "first question"}))
    seen = (await api.get(url)).json()["results"]  # what a second page shows
    await read_events(await post(api, url, {"content": "second question"}))  # from the first page
    upstream.requests.clear()

    regenerated = await post(api, f"/api/conversations/{conversation.pk}/regenerate",
                             {"last_message_id": seen[-1]["id"]})
    edited = await post(api, f"/api/messages/{seen[0]['id']}/edit",
                        {"content": "better question", "last_message_id": seen[-1]["id"]})

    listed = (await api.get(url)).json()["results"]
    assert [r.status_code for r in (regenerated, edited)] == [409, 409]
    assert {r.json()["error"]["code"] for r in (regenerated, edited)} == {"conversation_changed"}
    assert [m["content"] for m in listed] == ["first question", "Hello, world!", "second question", "Hello, world!"]
    assert upstream.requests == []


async def test_regenerate_and_edit_go_ahead_for_a_page_that_shows_the_last_message(api, conversation, upstream):
    url = f"/api/conversations/{conversation.pk}/messages"
    await read_events(await post(api, url, {"content": "question"}))
    seen = (await api.get(url)).json()["results"]
    upstream.script.chunks = ["Another"]

    await read_events(await post(api, f"/api/conversations/{conversation.pk}/regenerate",
                                 {"last_message_id": seen[-1]["id"]}))
    seen = (await api.get(url)).json()["results"]
    await read_events(await post(api, f"/api/messages/{seen[0]['id']}/edit",
                                 {"content": "better", "last_message_id": seen[-1]["id"]}))

    listed = (await api.get(url)).json()["results"]
    assert [m["content"] for m in listed] == ["better", "Another"]


async def test_regenerate_and_edit_refuse_a_page_that_read_the_last_answer_before_it_was_continued(
        api, conversation, upstream):
    url = f"/api/conversations/{conversation.pk}/messages"
    upstream.script.finish_reason = "length"
    await read_events(await post(api, url, {"content": "tell me"}))
    seen = (await api.get(url)).json()["results"]  # what a second page shows
    upstream.script.finish_reason = "stop"
    await read_events(await post(api, f"/api/messages/{seen[-1]['id']}/continue", {}))  # the first page
    upstream.requests.clear()
    shown = {"last_message_id": seen[-1]["id"], "last_message_chars": len(seen[-1]["content"])}

    regenerated = await post(api, f"/api/conversations/{conversation.pk}/regenerate", shown)
    edited = await post(api, f"/api/messages/{seen[0]['id']}/edit", {"content": "better", **shown})

    listed = (await api.get(url)).json()["results"]
    assert [r.status_code for r in (regenerated, edited)] == [409, 409]
    assert {r.json()["error"]["code"] for r in (regenerated, edited)} == {"conversation_changed"}
    assert [m["id"] for m in listed] == [m["id"] for m in seen]
    assert listed[-1]["content"] == "Hello, world!Hello, world!"
    assert upstream.requests == []


async def test_regenerate_goes_ahead_for_a_page_that_read_the_last_answer_as_it_is(api, conversation, upstream):
    url = f"/api/conversations/{conversation.pk}/messages"
    await read_events(await post(api, url, {"content": "question 🙂"}))
    upstream.script.chunks = ["Another 🙂"]
    seen = (await api.get(url)).json()["results"]
    shown = {"last_message_id": seen[-1]["id"], "last_message_chars": len(seen[-1]["content"])}

    await read_events(await post(api, f"/api/conversations/{conversation.pk}/regenerate", shown))

    listed = (await api.get(url)).json()["results"]
    assert [m["content"] for m in listed] == ["question 🙂", "Another 🙂"]
