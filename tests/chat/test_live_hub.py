"""One web process's hub of an answer's live channel: a gap is asked of the relay at once (the
hub announces itself again from where its text ends) and read from the rows if it stays open."""

import asyncio

import pytest
from channels.layers import get_channel_layer
from django.conf import settings as configured

from chatapp import selectors
from chatapp.models import Generation
from chatapp.selectors import Progress
from chatapp.runtime import held_tasks
from chatapp.streaming import live_channel, live_hub

GENERATION_ID = 4242
WHOLE = "Hello big world!"


def saved(text: str) -> Progress:
    """The rows of a streaming answer whose saved text is `text`, read from its first character."""
    return Progress(Generation(status="streaming"), len(text), text, len(text), "streaming")


async def until_text(hub, expected: str) -> None:
    async with asyncio.timeout(10):
        while hub.text.text != expected:
            await hub.changed.wait()


@pytest.fixture
async def relay_inbox():
    """What the hub tells the relay of this answer, read in the relay's place."""
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(live_channel.relay_group(GENERATION_ID), channel)
    yield lambda: asyncio.wait_for(layer.receive(channel), 10)
    await layer.group_discard(live_channel.relay_group(GENERATION_ID), channel)


async def test_a_delta_past_a_gap_makes_the_hub_announce_itself_again_and_the_relays_answer_fills_it(
        settings, relay_inbox):
    settings.CHAT_WATCH_INTERVAL_SECONDS = 60  # the rows play no part
    layer = get_channel_layer()
    async with live_hub.joined(GENERATION_ID) as hub:
        hub.heard_rows(saved("Hello"))
        joined = await relay_inbox()
        await layer.group_send(live_channel.live_group(GENERATION_ID),
                               {"type": live_channel.DELTA, "offset": 10, "text": "world!"})  # " big " dropped
        asked_again = await relay_inbox()
        await layer.send(asked_again["channel"], {"type": live_channel.DELTA, "offset": 5, "text": " big world!"})

        await until_text(hub, WHOLE)

    assert (joined["type"], joined["offset"]) == (live_channel.READER, len("Hello"))
    assert (asked_again["offset"], asked_again["channel"]) == (len("Hello"), joined["channel"])


async def test_a_gap_the_relay_does_not_fill_is_read_from_the_rows_from_where_the_text_ends(
        settings, monkeypatch, relay_inbox):
    settings.CHAT_WATCH_INTERVAL_SECONDS = 0.05
    asked_after = []

    def rows(*, generation_id: int, after: int = 0) -> Progress:
        asked_after.append(after)
        return Progress(Generation(status="streaming"), len(WHOLE), WHOLE[after:], len(WHOLE), "streaming")

    monkeypatch.setattr(selectors, "generation_progress", rows)
    layer = get_channel_layer()
    async with live_hub.joined(GENERATION_ID) as hub:
        hub.heard_rows(saved("Hello"))
        await layer.group_send(live_channel.live_group(GENERATION_ID),
                               {"type": live_channel.DELTA, "offset": 10, "text": "world!"})

        await until_text(hub, WHOLE)

    assert asked_after[0] == len("Hello")


async def test_watchers_of_one_answer_in_a_process_share_one_hub_and_one_member_of_its_live_group(monkeypatch):
    monkeypatch.setattr(live_channel, "LAYER_WITHIN_SECONDS", 0.2)  # the leaving's wait for late messages
    layer = get_channel_layer()
    joins, leaves = [], []
    group_add, group_discard = layer.group_add, layer.group_discard
    monkeypatch.setattr(layer, "group_add", lambda group, channel: joins.append(group) or group_add(group, channel))
    monkeypatch.setattr(layer, "group_discard",
                        lambda group, channel: leaves.append(group) or group_discard(group, channel))

    async with live_hub.joined(GENERATION_ID) as first, live_hub.joined(GENERATION_ID) as second:
        shared = first is second
    await held_tasks.all_done()  # the hub's leaving, awaited by nobody

    assert shared
    assert joins == leaves == [live_channel.live_group(GENERATION_ID)]  # left once the last watcher did


@pytest.mark.skipif(not configured.REDIS_URL, reason="the layer of the settings, on Redis: REDIS_URL")
async def test_a_hub_that_left_keeps_nothing_of_what_still_came_for_it_in_the_layer(settings, monkeypatch):
    # channels_redis hands each message for a channel of this process to that channel's buffer,
    # read or not: a message that came after its reader left stayed there for the process's life.
    settings.CHAT_WATCH_INTERVAL_SECONDS = 60
    monkeypatch.setattr(live_channel, "LAYER_WITHIN_SECONDS", 0.2)
    layer = get_channel_layer()
    async with live_hub.joined(GENERATION_ID + 1) as staying:  # its receive takes what comes
        staying.heard_rows(saved(""))
        async with live_hub.joined(GENERATION_ID) as leaving:
            leaving.heard_rows(saved(""))
            gone = leaving._channel
        await layer.send(gone, {"type": live_channel.DELTA, "offset": 0, "text": "late"})  # in flight as it left
        await layer.group_send(live_channel.live_group(GENERATION_ID + 1),
                               {"type": live_channel.DELTA, "offset": 0, "text": WHOLE})
        await until_text(staying, WHOLE)  # the late one, sent first, was taken before this
        await held_tasks.all_done()  # the hub's leaving, awaited by nobody

        assert gone not in layer.receive_buffer
