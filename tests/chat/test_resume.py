"""An answer outlives its page's connection: it goes on for CHAT_RESUME_GRACE_SECONDS of no
reader, a page that comes back continues it from the character it holds, and nobody back ends
it as a departed client's with the text generated."""

import asyncio
import json
import time

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient

from harness import waiting
from chatapp import selectors
from chatapp.models import Generation, Message
from tests import factories
from tests.chat.streams import Browser, EventReader, names, read_events, text_of

pytestmark = pytest.mark.django_db(transaction=True)

GRACE_S = 1.0
ANSWER = [f" w{i}" for i in range(40)]


@pytest.fixture
def grace(settings):
    settings.CHAT_RESUME_GRACE_SECONDS = GRACE_S


async def leave_after(api, conversation, upstream, deltas: int) -> tuple[Browser, Generation]:
    """Sends a message, reads `deltas` deltas, and drops the connection (not a Stop); the
    browser's `left_at` is the monotonic time it hung up."""
    browser = Browser(api, f"/api/conversations/{conversation.pk}/messages")
    await browser.post({"content": "count"})
    await browser.read_until(deltas=deltas)
    browser.left_at = time.monotonic()
    await browser.hang_up()
    generation = await sync_to_async(Generation.objects.get)(conversation=conversation)
    return browser, generation


async def final(generation: Generation) -> Generation:
    """The row once its final write is done."""
    ended = Generation.objects.exclude(status__in=Generation.LIVE_STATUSES).filter(pk=generation.pk)
    await sync_to_async(waiting.wait_until)(ended.exists, 10, "the answer's final write")
    return await sync_to_async(Generation.objects.get)(pk=generation.pk)


async def test_an_answer_nobody_comes_back_to_ends_after_the_grace_as_client_gone_with_the_text_generated(
        api, conversation, user, upstream, grace):
    upstream.script.chunks = [f" w{i}" for i in range(1000)]
    upstream.script.interval_s = 0.02
    browser, generation = await leave_after(api, conversation, upstream, deltas=3)

    assert await asyncio.to_thread(upstream.hung_up.wait, 10)
    took = time.monotonic() - browser.left_at
    generation = await final(generation)
    message = await sync_to_async(Message.objects.get)(pk=generation.message_id)
    seen = text_of(browser.events)

    assert GRACE_S <= took < GRACE_S + 1.0
    assert (generation.status, generation.cancelled_by, generation.finish_reason) == (
        "stopped", "client_gone", "cancelled")
    # The upstream was read on while nobody was there: more than the page saw, in order.
    assert len(generation.final_text) > len(seen) and generation.final_text.startswith(seen)
    assert "".join(upstream.script.chunks).startswith(generation.final_text)
    assert message.content == generation.final_text
    assert await sync_to_async(selectors.streams_open)(user=user) == 0


async def test_the_per_user_limit_counts_an_answer_nobody_reads_until_it_ends(
        api, conversation, user, upstream, grace, settings):
    settings.CHAT_MAX_STREAMS_PER_USER = 1
    upstream.script.chunks = ANSWER
    upstream.script.stall_after = 2
    await leave_after(api, conversation, upstream, deltas=2)

    refused = await api.post(f"/api/conversations/{conversation.pk}/messages",
                             json.dumps({"content": "again"}), content_type="application/json")

    assert refused.status_code == 429
    assert await asyncio.to_thread(upstream.hung_up.wait, 10)


async def test_a_page_back_within_the_grace_continues_the_same_answer_from_the_character_it_holds(
        api, conversation, upstream, grace):
    upstream.script.chunks = ANSWER
    upstream.script.interval_s = 0.02
    browser, generation = await leave_after(api, conversation, upstream, deltas=3)
    held = text_of(browser.events)

    resumed = await read_events(await api.get(f"/api/generations/{generation.pk}/events?from={len(held)}"))
    await sync_to_async(generation.refresh_from_db)()

    assert names(resumed)[0] == "resume" and names(resumed)[-1] == "done"
    assert resumed[0][1]["offset"] == len(held) and resumed[0][1]["status"] == "streaming"
    assert held + text_of(resumed) == "".join(ANSWER) == generation.final_text
    assert generation.status == "completed" and not upstream.hung_up.is_set()
    assert resumed[-1][1]["status"] == "completed"


async def test_an_answer_that_ends_while_nobody_reads_waits_for_its_page_within_the_grace(
        api, conversation, upstream, settings):
    settings.CHAT_RESUME_GRACE_SECONDS = 10  # the row is read while it waits, however busy the machine
    upstream.script.chunks = ["One", " two", " three"]
    upstream.script.interval_s = 0.05
    browser, generation = await leave_after(api, conversation, upstream, deltas=1)
    held = text_of(browser.events)
    # Until a page comes back (or the grace ends) the row says streaming: a Stop can still cut it.
    await sync_to_async(generation.refresh_from_db)()
    assert generation.status == "streaming"

    resumed = await read_events(await api.get(f"/api/generations/{generation.pk}/events?from={len(held)}"))

    assert held + text_of(resumed) == "One two three"
    assert resumed[-1][1]["status"] == "completed"


async def test_a_stop_while_the_page_is_away_stops_at_once_with_what_it_saw(api, conversation, upstream, grace):
    upstream.script.chunks = [f" w{i}" for i in range(1000)]
    upstream.script.interval_s = 0.02
    browser, generation = await leave_after(api, conversation, upstream, deltas=3)
    seen = text_of(browser.events)

    stopped = await api.post(f"/api/generations/{generation.pk}/stop", json.dumps({"seen_chars": len(seen)}),
                             content_type="application/json")
    stopped_at = time.monotonic()
    assert await asyncio.to_thread(upstream.hung_up.wait, 10)
    took = time.monotonic() - stopped_at
    generation = await final(generation)

    assert stopped.status_code == 202
    assert took < GRACE_S  # not left to the grace
    assert (generation.status, generation.cancelled_by) == ("stopped", "user")
    assert generation.final_text == seen
    message = await sync_to_async(Message.objects.get)(pk=generation.message_id)
    assert message.content == seen


async def test_an_admins_stop_while_the_page_is_away_stops_at_once_keeping_all_that_was_sent(
        api, conversation, upstream, grace):
    upstream.script.chunks = [f" w{i}" for i in range(1000)]
    upstream.script.interval_s = 0.02
    browser, generation = await leave_after(api, conversation, upstream, deltas=3)
    admin = AsyncClient()
    await admin.aforce_login(await sync_to_async(factories.staff_member)())

    stopped = await admin.post(f"/api/staff/generations/{generation.pk}/stop")
    assert await asyncio.to_thread(upstream.hung_up.wait, GRACE_S / 2)
    generation = await final(generation)

    assert stopped.status_code == 202
    assert (generation.status, generation.cancelled_by) == ("stopped", "admin")
    assert generation.final_text.startswith(text_of(browser.events))


async def test_a_resume_from_beyond_a_stop_gets_the_stopped_text_whole(api, conversation, upstream, grace):
    upstream.script.chunks = ANSWER
    upstream.script.interval_s = 0.02
    browser, generation = await leave_after(api, conversation, upstream, deltas=5)
    seen = text_of(browser.events)
    # Another page saw less when its user pressed Stop.
    await api.post(f"/api/generations/{generation.pk}/stop", json.dumps({"seen_chars": 3}),
                   content_type="application/json")
    await final(generation)

    resumed = await read_events(await api.get(f"/api/generations/{generation.pk}/events?from={len(seen)}"))

    assert names(resumed) == ["prefix", "done"]
    assert resumed[0][1]["text"] == seen[:3] and resumed[-1][1]["status"] == "stopped"


# Past 4,300 digits Python's int() refuses a string (CVE-2020-10735): a ValueError, not a number.
@pytest.mark.parametrize("value", ["-1", "x", "1.5", str(2**31), "9" * 5000])
async def test_a_resume_from_a_bad_offset_is_refused_before_any_stream(api, conversation, upstream, value):
    upstream.script.chunks = ["Hi"]
    response = await api.post(f"/api/conversations/{conversation.pk}/messages",
                              json.dumps({"content": "go"}), content_type="application/json")
    await read_events(response)
    generation = await sync_to_async(Generation.objects.get)(conversation=conversation)

    refused = await api.get(f"/api/generations/{generation.pk}/events?from={value}")

    assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_value"


@pytest.fixture
def row_reads(settings, monkeypatch) -> list[dict]:
    """Every read of an answer's rows for a watch; rows saved and read too rarely to matter, so
    that whatever a watcher gets before the end came live."""
    settings.CHAT_SAVE_INTERVAL_SECONDS = 60
    settings.CHAT_WATCH_INTERVAL_SECONDS = 60
    reads = []
    read = selectors.generation_progress
    monkeypatch.setattr(selectors, "generation_progress", lambda **kwargs: reads.append(kwargs) or read(**kwargs))
    return reads


async def watched_live(api, conversation, upstream, watchers: int):
    """An answer and `watchers` watch streams of it, each live while it still streamed: (whether
    it did, the owner's reader, each watcher's events)."""
    upstream.script.chunks = ANSWER
    upstream.script.interval_s = 0.02
    response = await api.post(f"/api/conversations/{conversation.pk}/messages",
                              json.dumps({"content": "go"}), content_type="application/json")
    owner = EventReader(response)
    await owner.until(lambda events: len(text_of(events)) > 0)
    owning = asyncio.ensure_future(owner.to_the_end())
    generation = await sync_to_async(Generation.objects.get)(conversation=conversation)
    readers = [EventReader(await api.get(f"/api/generations/{generation.pk}/events")) for _ in range(watchers)]
    for reader in readers:
        await reader.until(lambda events: len(text_of(events)) > len(ANSWER[0]))
    still_streaming = not owning.done()
    watched = await asyncio.gather(*(reader.to_the_end() for reader in readers))
    await owning
    return still_streaming, owner, watched


async def test_a_watcher_gets_every_delta_live_from_the_relay_not_from_the_saved_rows(
        api, conversation, upstream, row_reads):
    still_streaming, owner, (watched,) = await watched_live(api, conversation, upstream, watchers=1)

    assert still_streaming
    assert len(row_reads) == 2  # the rows before it joined, and the final ones: no query per delta
    assert names(watched)[0] == "prefix" and names(watched)[-1] == "done"
    assert watched[0][1]["text"] + text_of(watched) == "".join(ANSWER)
    assert watched[-1] == owner.events[-1]


async def test_two_watchers_read_the_rows_once_each_to_join_and_the_final_rows_once_between_them(
        api, conversation, upstream, row_reads):
    still_streaming, owner, watched = await watched_live(api, conversation, upstream, watchers=2)

    assert still_streaming
    assert len(row_reads) == 3
    for events in watched:
        assert events[0][1]["text"] + text_of(events) == "".join(ANSWER)
        assert events[-1] == owner.events[-1]
