"""The watch stream: another page follows an answer from its saved rows, to the relay's `done`."""

import asyncio
import json
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient
from django.utils import timezone

from chatapp.models import Generation
from chatapp.tasks import fail_interrupted_streams
from tests import factories
from tests.chat.streams import Browser, EventReader, names, read_events, shown, text_of

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def quick_saves(settings):
    """The relay saves and the watcher reads often, so that a short answer is seen growing."""
    settings.CHAT_SAVE_INTERVAL_SECONDS = 0.05
    settings.CHAT_WATCH_INTERVAL_SECONDS = 0.05


async def start_answer(api, conversation, latest: bool = False) -> tuple[asyncio.Future, Generation]:
    """Sends a message and reads its answer in the background; returns (the reading, the row:
    the conversation's only one, or with `latest` its newest)."""
    response = await api.post(f"/api/conversations/{conversation.pk}/messages",
                              json.dumps({"content": "go"}), content_type="application/json")
    reading = asyncio.ensure_future(read_events(response))
    rows = Generation.objects.select_related("message").filter(conversation=conversation)
    return reading, await sync_to_async(lambda: rows.latest("pk") if latest else rows.get())()


async def some_text_saved(generation: Generation) -> None:
    """Waits until the relay has saved part of the answer."""
    async with asyncio.timeout(10):
        while not await sync_to_async(Generation.objects.filter(pk=generation.pk).exclude(final_text="").exists)():
            await asyncio.sleep(0.02)


async def watched_from_its_first_save(api, conversation, upstream, words: int):
    """An answer of `words` words, one each 50 ms, watched from once part of it was saved:
    (the watch's response, its events, the answer's own events, its row)."""
    upstream.script.chunks = [f" w{i}" for i in range(words)]
    upstream.script.interval_s = 0.05
    reading, generation = await start_answer(api, conversation)
    await some_text_saved(generation)
    response = await api.get(f"/api/generations/{generation.pk}/events")
    watched = await read_events(response)
    return response, watched, await reading, generation


async def test_a_watcher_gets_the_saved_prefix_then_the_new_text_then_the_relays_done(
        api, conversation, upstream, quick_saves):
    response, watched, answered, generation = await watched_from_its_first_save(api, conversation, upstream, 30)

    await sync_to_async(generation.message.refresh_from_db)()
    prefix = watched[0][1]
    assert response["Content-Type"] == "text/event-stream"
    assert response["Cache-Control"] == "no-cache" and response["X-Accel-Buffering"] == "no"
    assert names(watched)[0] == "prefix" and names(watched)[-1] == "done"
    assert set(names(watched)[1:-1]) == {"delta"}
    assert prefix["generation_id"] == generation.pk and prefix["message_id"] == generation.message_id
    assert prefix["status"] == "streaming"
    assert 0 < len(prefix["text"]) < len(text_of(answered))
    assert shown(watched) == text_of(answered) == generation.message.content
    assert watched[-1] == answered[-1]  # the relay's own done


async def test_a_watcher_is_told_how_much_of_what_it_holds_is_stored_as_the_relays_saves_commit(
        api, conversation, upstream, quick_saves):
    _, watched, _, _ = await watched_from_its_first_save(api, conversation, upstream, 40)

    held = len(watched[0][1]["text"])  # the prefix: stored, as the page knows
    told = []  # (code points the page holds with the delta, what the delta says is stored)
    for name, payload in watched[1:]:
        if name == "delta":
            held += len(payload["text"])
            if "saved" in payload:
                told.append((held, payload["saved"]))
    assert told, "no delta said what was stored"
    assert all(len(watched[0][1]["text"]) < saved <= holds for holds, saved in told)
    assert [saved for _, saved in told] == sorted({saved for _, saved in told})  # news only, growing


async def test_a_watcher_of_a_conversations_first_answer_hears_that_the_model_names_it_and_of_the_second_not(
        api, conversation, upstream, quick_saves, settings):
    settings.CHAT_MODEL_TITLES = True
    upstream.script.chunks = [f" w{i}" for i in range(20)]
    upstream.script.interval_s = 0.05
    ends = []
    for _ in range(2):
        reading, generation = await start_answer(api, conversation, latest=True)
        await some_text_saved(generation)
        watched = await read_events(await api.get(f"/api/generations/{generation.pk}/events"))
        ends.append((watched[-1], (await reading)[-1]))

    (first_watched, first_answered), (second_watched, second_answered) = ends
    assert first_watched[1]["title_requested"] is True and first_watched == first_answered
    assert "title_requested" not in second_watched[1] and second_watched == second_answered


async def test_an_ended_answer_gives_its_text_and_done_at_once(api, user):
    def ended():
        answer = factories.message(factories.conversation(owner=user), role="assistant",
                                   status="truncated", content="Cut at the limit")
        return factories.generation(answer, finish_reason="length", final_text="Cut at the limit",
                                    input_tokens=9, output_tokens=4, ttft_ms=12.5)
    generation = await sync_to_async(ended)()

    watched = await read_events(await api.get(f"/api/generations/{generation.pk}/events"))

    assert watched == [
        ("prefix", {"generation_id": generation.pk, "message_id": generation.message_id,
                    "status": "truncated", "text": "Cut at the limit", "earlier_chars": 0,
                    "heartbeat_s": 15, "resume_grace_s": 0}),
        ("done", {"generation_id": generation.pk, "message_id": generation.message_id,
                  "finish_reason": "length", "status": "truncated", "message_status": "truncated",
                  "usage": {"prompt_tokens": 9, "completion_tokens": 4}, "ttft_ms": 12.5}),
    ]


async def test_a_watcher_of_a_continuation_that_failed_is_told_its_answer_stays_truncated(api, user):
    def failed_continuation():
        answer = factories.message(factories.conversation(owner=user), role="assistant",
                                   status="truncated", content="Before. And")
        factories.generation(answer, finish_reason="length", final_text="Before.")
        return factories.generation(answer, finish_reason="error", final_text=" And")
    generation = await sync_to_async(failed_continuation)()

    watched = await read_events(await api.get(f"/api/generations/{generation.pk}/events"))

    done = dict(watched)["done"]
    assert (done["status"], done["message_status"]) == ("failed", "truncated")


async def test_a_continued_answer_is_watched_with_the_messages_whole_text_and_says_where_it_began(api, user):
    def continued():
        answer = factories.message(factories.conversation(owner=user), role="assistant",
                                   status="streaming", content="Before. And after")
        factories.generation(answer, finish_reason="length", final_text="Before.")
        return factories.generation(answer, final_text=" And after")
    generation = await sync_to_async(continued)()
    response = await api.get(f"/api/generations/{generation.pk}/events")
    watcher = EventReader(response)

    await watcher.until(lambda events: len(events) >= 1)

    prefix = watcher.events[0][1]
    assert (prefix["text"], prefix["earlier_chars"]) == ("Before. And after", len("Before."))


async def test_an_answer_continued_since_is_watched_and_resumed_with_its_own_text(api, user):
    def continued_since():
        answer = factories.message(factories.conversation(owner=user), role="assistant",
                                   status="truncated", content="Before. And after")
        first = factories.generation(answer, finish_reason="length", final_text="Before.")
        factories.generation(answer, finish_reason="length", final_text=" And after")
        return first
    generation = await sync_to_async(continued_since)()

    watched = dict(await read_events(await api.get(f"/api/generations/{generation.pk}/events")))
    resumed = await read_events(await api.get(f"/api/generations/{generation.pk}/events?from=3"))

    assert (watched["prefix"]["text"], watched["prefix"]["earlier_chars"]) == ("Before.", 0)
    assert (dict(resumed)["resume"]["earlier_chars"], dict(resumed)["resume"]["stored_chars"]) == (0, 7)
    assert text_of(resumed) == "ore."


async def test_another_users_watch_is_404_and_a_signed_out_one_401(api, other_user):
    generation = await sync_to_async(factories.generation)(
        await sync_to_async(factories.message)(await sync_to_async(factories.conversation)(owner=other_user),
                                               role="assistant", content="secret"))

    theirs = await api.get(f"/api/generations/{generation.pk}/events")
    missing = await api.get("/api/generations/999999999/events")
    signed_out = await AsyncClient().get(f"/api/generations/{generation.pk}/events")

    assert theirs.status_code == 404 and "secret" not in theirs.content.decode()
    assert missing.status_code == 404
    assert signed_out.status_code == 401


async def test_a_watcher_of_a_silent_answer_gets_pings_and_its_stop_ends_the_answer(
        api, conversation, upstream, quick_saves, settings):
    settings.CHAT_HEARTBEAT_SECONDS = 0.1
    upstream.script.chunks = ["Quiet", " now", " then", " silence"]
    upstream.script.interval_s = 0.1  # each delta is saved (the relay saves when one goes out)
    upstream.script.stall_after = 3
    reading, generation = await start_answer(api, conversation)
    watcher = EventReader(await api.get(f"/api/generations/{generation.pk}/events"))

    await watcher.until(lambda events: shown(events) == "Quiet now then")
    await watcher.until(lambda events: names(events)[-2:] == ["ping", "ping"])
    stopped = await api.post(f"/api/generations/{generation.pk}/stop",
                             json.dumps({"seen_chars": len(shown(watcher.events))}),
                             content_type="application/json")
    watched = await watcher.to_the_end()
    answered = await reading

    await sync_to_async(generation.refresh_from_db)()
    assert stopped.status_code == 202
    assert shown(watched) == "Quiet now then" == generation.final_text
    assert watched[-1] == answered[-1] and watched[-1][1]["status"] == "stopped"
    assert generation.cancelled_by == "user"
    assert await asyncio.to_thread(upstream.hung_up.wait, 10)


async def test_an_answer_cut_shorter_than_the_watcher_saw_is_sent_whole_again_before_done(
        api, conversation, upstream, quick_saves):
    upstream.script.chunks = [f" w{i}" for i in range(60)]
    upstream.script.interval_s = 0.05
    reading, generation = await start_answer(api, conversation)
    watcher = EventReader(await api.get(f"/api/generations/{generation.pk}/events"))

    await watcher.until(lambda events: len(shown(events)) >= 12)
    # The page that started the answer saw less when its user pressed Stop.
    await api.post(f"/api/generations/{generation.pk}/stop", json.dumps({"seen_chars": 3}),
                   content_type="application/json")
    watched = await watcher.to_the_end()
    await reading

    assert names(watched)[-2:] == ["prefix", "done"]
    assert watched[-2][1]["text"] == " w0" and watched[-2][1]["status"] == "stopped"
    assert watched[-1][1]["status"] == "stopped"


async def test_a_watcher_that_leaves_ends_its_stream(api, conversation, upstream, quick_saves):
    upstream.script.chunks = ["Still", " going"]
    upstream.script.stall_after = 1
    reading, generation = await start_answer(api, conversation)
    watcher = Browser(api, f"/api/generations/{generation.pk}/events", method="GET")

    await watcher.get()
    await watcher.read_until(events=("prefix",))
    await watcher.hang_up()  # fails unless the stream ends within its wait

    await api.post(f"/api/generations/{generation.pk}/stop", json.dumps({"seen_chars": 0}),
                   content_type="application/json")
    await reading
    assert watcher.status == 200


async def test_a_watcher_of_an_answer_whose_relay_died_settles_when_the_reaper_ends_it(api, user, quick_saves):
    def orphaned():
        answer = factories.message(factories.conversation(owner=user), role="assistant",
                                   status="streaming", content="Left half")
        return factories.generation(answer, final_text="Left half",
                                    heartbeat_at=timezone.now() - timedelta(hours=1))
    generation = await sync_to_async(orphaned)()
    watcher = EventReader(await api.get(f"/api/generations/{generation.pk}/events"))
    await watcher.until(lambda events: names(events) == ["prefix"])

    reaped = await sync_to_async(fail_interrupted_streams)()
    watched = await watcher.to_the_end()

    assert reaped == 1
    assert names(watched) == ["prefix", "done"] and shown(watched) == "Left half"
    assert watched[-1][1]["status"] == "failed" and watched[-1][1]["finish_reason"] == "error"
