"""A relay's inbox leaves its group when the relay is done, and a channel layer that stalls
then cannot keep its task, or the event loop's close, waiting."""

import asyncio

import pytest
from channels.layers import get_channel_layer
from django.conf import settings as configured

from chatapp.streaming import live_channel
from chatapp.streaming.relay_inbox import RelayInbox
from tests.fakes.cancellation_as_sent import cancel_as_next_sent


async def listening_on_a_stalling_layer(settings, monkeypatch, leave_within_s: float,
                                        layer: str = "StallingChannelLayer") -> list[asyncio.Task]:
    """An inbox's tasks, its stop listener joined to its group on a layer that then answers
    nothing (tests/fakes/failing_channel_layer.py), the leaving bounded at `leave_within_s`."""
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": f"tests.fakes.failing_channel_layer.{layer}"}}
    settings.CHAT_RELAY_HEARTBEAT_SECONDS = 3600
    monkeypatch.setattr(live_channel, "LAYER_WITHIN_SECONDS", leave_within_s)
    inbox = RelayInbox(4242, on_stop=lambda: None, on_reader=lambda message: None,
                       first_delta_sent=asyncio.Event())
    tasks = inbox.listen(at_once=False)
    await asyncio.wait_for(get_channel_layer().joined.wait(), 10)
    return tasks


async def test_a_stop_listener_cancelled_while_its_layer_stalls_on_leaving_ends_within_the_bound(
        settings, monkeypatch):
    tasks = await listening_on_a_stalling_layer(settings, monkeypatch, leave_within_s=0.05)

    for task in tasks:
        task.cancel()
    done, _ = await asyncio.wait(tasks, timeout=10)

    assert set(done) == set(tasks)
    assert all(task.cancelled() for task in tasks)  # the cancellation went through, not swallowed


async def test_a_stop_listener_cancelled_never_waits_on_its_layer_to_leave_even_past_the_bound(
        settings, monkeypatch):
    # The bound once did not hold: a test's loop, closing, waited 300 s on a leaving stuck in
    # redis-py's connect (make check, 2026-12-06). The listener's end must not depend on it.
    tasks = await listening_on_a_stalling_layer(settings, monkeypatch, leave_within_s=3600)

    for task in tasks:
        task.cancel()
        task.cancel()  # the relay's, then a closing loop's: both spent on one wake-up
    done, _ = await asyncio.wait(tasks, timeout=10)

    assert set(done) == set(tasks)
    assert all(task.cancelled() for task in tasks)


async def test_a_stop_listener_whose_layer_turns_its_cancellation_into_a_timeout_still_ends(settings, monkeypatch):
    tasks = await listening_on_a_stalling_layer(settings, monkeypatch, leave_within_s=0.05,
                                                layer="CancellationAsTimeoutChannelLayer")

    for task in tasks:
        task.cancel()
    done, _ = await asyncio.wait(tasks, timeout=10)

    assert set(done) == set(tasks)
    assert all(task.cancelled() for task in tasks)


@pytest.mark.skipif(not configured.REDIS_URL, reason="the channel layer on Redis: REDIS_URL")
async def test_a_stop_listener_cancelled_as_its_command_reaches_redis_still_ends(settings, monkeypatch):
    """The layer the settings configure, on the real Redis: a cancellation that lands as a
    command goes out must not be lost there (tests/fakes/cancellation_as_sent.py)."""
    settings.CHAT_RELAY_HEARTBEAT_SECONDS = 3600
    inbox = RelayInbox(4243, on_stop=lambda: None, on_reader=lambda message: None,
                       first_delta_sent=asyncio.Event())
    tasks = inbox.listen(at_once=False)
    listener = tasks[0]  # joins its group, then receives: each a command to Redis
    cancel_as_next_sent(monkeypatch, listener)

    done, _ = await asyncio.wait({listener}, timeout=15)
    for task in tasks:
        task.cancel()

    assert listener in done, "the cancelled listener went on receiving"
    assert listener.cancelled()
