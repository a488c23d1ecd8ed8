"""A browser that leaves mid-answer: the upstream is closed at once and what it saw is kept."""

import asyncio
import gc
import json

import pytest
from asgiref.sync import sync_to_async

from chatapp.models import Generation, Message
from chatapp.runtime.database_threads import on_database_thread
from harness import waiting

from tests.chat.streams import Browser, read_events, text_of

pytestmark = pytest.mark.django_db(transaction=True)


async def test_a_client_that_leaves_after_three_deltas_leaves_exactly_their_text(
        api, conversation, upstream):
    upstream.script.chunks = ["One", " two", " three", " four", " five", " six"]
    upstream.script.interval_s = 0.3  # a fourth delta is far off when the browser leaves
    browser = Browser(api, f"/api/conversations/{conversation.pk}/messages")

    await browser.post({"content": "count"})
    await browser.read_until(deltas=3)
    await browser.hang_up()
    hung_up = await asyncio.to_thread(upstream.hung_up.wait, 10)

    answer = await sync_to_async(Message.objects.get)(conversation=conversation, role="assistant")
    generation = await sync_to_async(Generation.objects.get)(message=answer)
    assert browser.status == 200
    assert text_of(browser.events) == "One two three"
    assert hung_up
    assert answer.status == "stopped" and answer.content == "One two three"
    assert generation.finish_reason == "cancelled" and generation.cancelled_by == "client_gone"
    assert generation.final_text == "One two three" and generation.finished_at is not None


async def test_the_message_list_says_an_answer_was_cut_by_a_departed_client_not_by_a_stop(
        api, conversation, upstream):
    upstream.script.chunks = ["One", " two", " three"]
    upstream.script.interval_s = 0.3
    browser = Browser(api, f"/api/conversations/{conversation.pk}/messages")
    await browser.post({"content": "count"})
    await browser.read_until(deltas=1)
    await browser.hang_up()
    await asyncio.to_thread(upstream.hung_up.wait, 10)

    listed = (await api.get(f"/api/conversations/{conversation.pk}/messages")).json()["results"]
    answer = listed[-1]
    assert answer["status"] == "stopped"
    assert answer["generation"]["status"] == "stopped"
    assert answer["generation"]["cancelled_by"] == "client_gone"


async def test_text_sent_before_the_upstream_pauses_is_saved_during_the_pause(
        api, conversation, upstream, settings):
    """Watchers and a crash read the rows: the last text must not wait for the next token."""
    settings.CHAT_SAVE_INTERVAL_SECONDS = 0.2
    upstream.script.chunks = ["One", " two", " three", " four"]
    upstream.script.interval_s = 0.05  # all within the first save interval
    upstream.script.stall_after = 3  # quiet after " three" until the browser leaves
    browser = Browser(api, f"/api/conversations/{conversation.pk}/messages")

    await browser.post({"content": "count"})
    # The text, not three deltas: a loaded relay sends " two three" as one, and then waits.
    await browser.read_until(text="One two three")
    assert text_of(browser.events) == "One two three"

    def saved_text() -> str:
        return Message.objects.get(conversation=conversation, role="assistant").content

    # Fails (TimeoutError) unless the text is saved while the upstream stays quiet.
    await on_database_thread(waiting.wait_until)(lambda: saved_text() == "One two three", 10,
                                                 "the text before the pause to be saved")
    await browser.hang_up()


async def dropped_unread(api, conversation) -> Generation:
    """Starts an answer and drops its response unread, as Django's handler drops one whose head
    could not go out because the browser left meanwhile."""
    response = await api.post(f"/api/conversations/{conversation.pk}/messages",
                              json.dumps({"content": "count"}), content_type="application/json")
    assert response.status_code == 200
    del response
    gc.collect()
    return await sync_to_async(Generation.objects.get)(message__conversation=conversation)


async def test_a_browser_gone_before_the_first_event_closes_the_upstream_and_ends_the_answer(
        api, conversation, upstream, settings):
    """Not a row streaming for the reaper, and the model writing for nobody."""
    settings.CHAT_RESUME_GRACE_SECONDS = 0  # no page may come back for it
    upstream.script.stall_after = 0  # the model is busy, and goes on until told

    generation = await dropped_unread(api, conversation)
    hung_up = await asyncio.to_thread(upstream.hung_up.wait, 10)
    ended = Generation.objects.filter(pk=generation.pk).exclude(status__in=Generation.LIVE_STATUSES)
    await on_database_thread(waiting.wait_until)(ended.exists, 10, "the answer's final write")

    await sync_to_async(generation.refresh_from_db)()
    assert hung_up
    assert (generation.status, generation.cancelled_by) == ("stopped", "client_gone")


async def test_an_answer_whose_browser_left_before_the_first_event_goes_on_for_its_page_to_resume(
        api, conversation, upstream, settings):
    settings.CHAT_RESUME_GRACE_SECONDS = 10

    generation = await dropped_unread(api, conversation)
    resumed = await read_events(await api.get(f"/api/generations/{generation.pk}/events?from=0"))

    assert text_of(resumed) == "Hello, world!"
    assert resumed[-1][0] == "done" and resumed[-1][1]["status"] == "completed"
