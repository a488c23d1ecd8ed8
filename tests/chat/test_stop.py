"""Stop keeps exactly what the user saw, and reaches the stream from any daphne process."""

import asyncio
import json
import os

import httpx2
import pytest
from asgiref.sync import sync_to_async
from django.conf import settings as django_settings
from django.test import AsyncClient

from chatapp.models import Generation
from chatapp.streaming import live_channel
from common.sse import SSEParser
from harness import child_process, ports
from stack import commands
from tests import factories, servers
from tests.chat.streams import Browser, names, read_events, stop_after_deltas

pytestmark = pytest.mark.django_db(transaction=True)


async def test_stop_ends_the_stream_and_keeps_only_the_text_the_user_saw(api, conversation, upstream):
    upstream.script.chunks = ["Alpha", " beta", " gamma", " delta", " epsilon"]
    upstream.script.interval_s = 0.2
    stopped, _, rest = await stop_after_deltas(api, conversation, deltas=2, seen_chars=8)
    hung_up = await asyncio.to_thread(upstream.hung_up.wait, 10)

    generation = await sync_to_async(Generation.objects.select_related("message").get)(conversation=conversation)
    assert stopped.status_code == 202
    assert names(rest)[-1] == "done" and rest[-1][1]["status"] == "stopped"
    assert hung_up
    assert generation.message.content == "Alpha be" and generation.message.status == "stopped"
    assert generation.final_text == "Alpha be"
    assert (generation.finish_reason, generation.cancelled_by) == ("cancelled", "user")
    assert generation.stop_seen_chars == 8
    listed = (await api.get(f"/api/conversations/{conversation.pk}/messages")).json()["results"]
    assert listed[-1]["generation"]["cancelled_by"] == "user"


async def test_a_stop_sent_before_the_relay_listens_still_ends_the_stream_and_frees_the_upstream(
        api, conversation, upstream):
    upstream.script.chunks = ["Alpha", " beta"]
    upstream.script.stall_after = 1  # then silence, until hung up
    response = await api.post(f"/api/conversations/{conversation.pk}/messages",
                              json.dumps({"content": "go"}), content_type="application/json")
    generation = await sync_to_async(Generation.objects.get)(conversation=conversation)

    # The view has returned, the stream has not been read: the relay has not subscribed yet, so
    # the Stop's channel-layer message reaches nobody.
    stopped = await api.post(f"/api/generations/{generation.pk}/stop", json.dumps({"seen_chars": 0}),
                             content_type="application/json")
    events = await asyncio.wait_for(read_events(response), timeout=10)
    hung_up = await asyncio.to_thread(upstream.hung_up.wait, 10)

    await sync_to_async(generation.refresh_from_db)()
    assert stopped.status_code == 202
    assert names(events)[-1] == "done" and events[-1][1]["status"] == "stopped"
    assert hung_up
    assert (generation.finish_reason, generation.cancelled_by) == ("cancelled", "user")


async def test_a_stop_is_answered_without_waiting_on_a_channel_layer_that_answers_nothing(
        api, conversation, upstream, settings, monkeypatch):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "tests.fakes.failing_channel_layer.SilentChannelLayer"}}
    settings.CHAT_RELAY_HEARTBEAT_SECONDS = 0.2  # the relay reads the Stop from the row
    monkeypatch.setattr(live_channel, "LAYER_WITHIN_SECONDS", 3600)  # no bound of the layer's helps
    upstream.script.chunks = ["Alpha", " beta"]
    upstream.script.stall_after = 1
    response = await api.post(f"/api/conversations/{conversation.pk}/messages",
                              json.dumps({"content": "go"}), content_type="application/json")
    generation = await sync_to_async(Generation.objects.get)(conversation=conversation)

    stopped = await asyncio.wait_for(
        api.post(f"/api/generations/{generation.pk}/stop", json.dumps({"seen_chars": 0}),
                 content_type="application/json"), timeout=10)
    events = await asyncio.wait_for(read_events(response), timeout=10)

    assert stopped.status_code == 202
    assert names(events)[-1] == "done" and events[-1][1]["status"] == "stopped"


async def test_deleting_a_conversation_stops_its_streaming_answer_and_frees_the_upstream(
        api, conversation, upstream):
    upstream.script.chunks = ["Alpha", " beta", " gamma"]
    upstream.script.stall_after = 2  # then silence, until hung up
    browser = Browser(api, f"/api/conversations/{conversation.pk}/messages")
    await browser.post({"content": "go"})
    await browser.read_until(deltas=2)

    deleted = await api.delete(f"/api/conversations/{conversation.pk}")
    await browser.read_until(events=("done",))
    hung_up = await asyncio.to_thread(upstream.hung_up.wait, 10)

    generation = await sync_to_async(Generation.objects.select_related("message").get)(conversation=conversation)
    assert deleted.status_code == 204
    assert browser.events[-1][1]["status"] == "stopped"
    assert hung_up
    assert (generation.status, generation.finish_reason, generation.cancelled_by) == ("stopped", "cancelled", "user")
    assert generation.final_text == "Alpha beta"  # the audit keeps all that was sent


async def ended_for_want_of_a_reader(api, conversation, upstream) -> Generation:
    """An answer whose page left after two deltas and never came back: no grace in these
    settings, so it ends at once as the departed client's, with all the text sent."""
    upstream.script.chunks = ["One", " two", " three", " four"]
    upstream.script.interval_s = 0.3
    browser = Browser(api, f"/api/conversations/{conversation.pk}/messages")
    await browser.post({"content": "go"})
    await browser.read_until(deltas=2)
    await browser.hang_up()
    return await sync_to_async(Generation.objects.select_related("message").get)(
        pk=browser.events[0][1]["generation_id"])


async def late_stop(api, generation_id: int, seen_chars: int):
    return await api.post(f"/api/generations/{generation_id}/stop", json.dumps({"seen_chars": seen_chars}),
                          content_type="application/json")


async def test_a_stop_that_arrives_after_the_answer_ended_for_want_of_a_reader_keeps_what_the_user_saw(
        api, conversation, upstream):
    ended = await ended_for_want_of_a_reader(api, conversation, upstream)
    assert (ended.status, ended.cancelled_by) == ("stopped", "client_gone") and ended.final_text.startswith("One two")

    late = await late_stop(api, ended.pk, seen_chars=5)

    generation = await sync_to_async(Generation.objects.select_related("message").get)(pk=ended.pk)
    assert late.status_code == 202 and late.json() == {"id": ended.pk, "status": "stopped"}
    assert (generation.status, generation.finish_reason, generation.cancelled_by) == ("stopped", "cancelled", "user")
    assert generation.final_text == generation.message.content == "One t"
    assert generation.stop_seen_chars == 5 and generation.finished_at == ended.finished_at
    listed = (await api.get(f"/api/conversations/{conversation.pk}/messages")).json()["results"]
    assert listed[-1]["content"] == "One t" and listed[-1]["generation"]["cancelled_by"] == "user"


async def test_a_late_stop_that_says_more_was_seen_than_was_stored_never_makes_the_text_longer(
        api, conversation, upstream):
    ended = await ended_for_want_of_a_reader(api, conversation, upstream)

    late = await late_stop(api, ended.pk, seen_chars=10_000)

    generation = await sync_to_async(Generation.objects.select_related("message").get)(pk=ended.pk)
    assert late.status_code == 202 and generation.cancelled_by == "user"
    assert generation.final_text == generation.message.content == ended.final_text


async def test_a_stop_that_arrives_after_the_answer_completed_answers_409_and_changes_nothing(
        api, conversation, upstream):
    upstream.script.chunks = ["One", " two"]
    events = await read_events(await api.post(f"/api/conversations/{conversation.pk}/messages",
                                              json.dumps({"content": "go"}), content_type="application/json"))
    ended = await sync_to_async(Generation.objects.select_related("message").get)(pk=events[0][1]["generation_id"])

    late = await late_stop(api, ended.pk, seen_chars=2)

    generation = await sync_to_async(Generation.objects.select_related("message").get)(pk=ended.pk)
    assert late.status_code == 409 and late.json()["error"]["code"] == "generation_ended"
    assert (generation.status, generation.cancelled_by, generation.stop_seen_chars) == ("completed", "", None)
    assert generation.final_text == generation.message.content == "One two"


async def test_a_second_late_stop_is_refused_and_changes_nothing(api, conversation, upstream):
    ended = await ended_for_want_of_a_reader(api, conversation, upstream)
    await late_stop(api, ended.pk, seen_chars=5)

    again = await late_stop(api, ended.pk, seen_chars=3)

    generation = await sync_to_async(Generation.objects.get)(pk=ended.pk)
    assert again.status_code == 409
    assert (generation.final_text, generation.cancelled_by) == ("One t", "user")


async def test_an_admins_stop_after_the_answer_ended_for_want_of_a_reader_is_refused(api, conversation, upstream):
    ended = await ended_for_want_of_a_reader(api, conversation, upstream)
    admin = AsyncClient()
    await admin.aforce_login(await sync_to_async(factories.staff_member)())

    refused = await admin.post(f"/api/staff/generations/{ended.pk}/stop")

    generation = await sync_to_async(Generation.objects.get)(pk=ended.pk)
    assert refused.status_code == 409
    assert (generation.final_text, generation.cancelled_by) == (ended.final_text, "client_gone")


@pytest.mark.process
@pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="processes share a channel layer only on Redis")
def test_a_stop_sent_to_another_daphne_process_stops_the_stream(user, conversation, upstream):
    upstream.script.chunks = [f" word{i}" for i in range(40)]
    upstream.script.interval_s = 0.1
    env = {"DATABASE_URL": servers.shared_database_url(), "INFERENCE_URL": django_settings.INFERENCE_URL,
           "DJANGO_SETTINGS_MODULE": "tests.settings", "DJANGO_SECRET_KEY": "shared-test-secret-" + "x" * 40}
    web_ports = [ports.free_port(), ports.free_port()]
    with child_process.running(commands.daphne(web_ports[0]), env=env, ready_url=f"http://127.0.0.1:{web_ports[0]}/healthz"), \
            child_process.running(commands.daphne(web_ports[1]), env=env, ready_url=f"http://127.0.0.1:{web_ports[1]}/healthz"):
        holder, other = (httpx2.Client(base_url=f"http://127.0.0.1:{p}", timeout=30) for p in web_ports)
        servers.sign_in(holder, user)
        other.cookies = holder.cookies
        token = holder.cookies["csrftoken"]
        with holder.stream("POST", f"/api/conversations/{conversation.pk}/messages",
                           json={"content": "go"}, headers={"X-CSRFToken": token}) as response:
            parser, events, stop = SSEParser(), [], None
            for chunk in response.iter_raw():
                events += parser.feed(chunk)
                deltas = [e for e in events if e.event == "delta"]
                if stop is None and len(deltas) == 3:
                    generation_id = json.loads(events[0].data)["generation_id"]
                    stop = other.post(f"/api/generations/{generation_id}/stop", json={"seen_chars": 12},
                                      headers={"X-CSRFToken": token})
    generation = Generation.objects.select_related("message").get(pk=generation_id)

    assert stop.status_code == 202
    assert events[-1].event == "done" and json.loads(events[-1].data)["status"] == "stopped"
    assert len([e for e in events if e.event == "delta"]) < 40
    assert generation.cancelled_by == "user" and generation.message.status == "stopped"
    assert generation.message.content == " word0 word1 word2"[:12]
    assert upstream.hung_up.wait(10)


on_redis = pytest.mark.skipif(not os.environ.get("REDIS_URL"),
                              reason="the production channel layer: Redis (CI sets REDIS_URL)")


@pytest.mark.slow
@on_redis
async def test_an_answer_whose_first_token_comes_after_6_s_streams_to_the_end_on_redis(
        api, conversation, upstream, settings):
    upstream.script.chunks = ["Late", " but", " whole"]
    # Longer than the layer's blocking pop (5 s, BRIEF §12), and the relay's heartbeat beats
    # twice meanwhile (its every tick a write and a wait on the layer that ends empty).
    upstream.script.first_delay_s = 6
    settings.CHAT_RELAY_HEARTBEAT_SECONDS = 2
    response = await api.post(f"/api/conversations/{conversation.pk}/messages",
                              json.dumps({"content": "go"}), content_type="application/json")
    events = await asyncio.wait_for(read_events(response), timeout=60)

    generation = await sync_to_async(Generation.objects.select_related("message").get)(conversation=conversation)
    assert events[-1][1]["status"] == "completed"
    assert generation.message.content == "Late but whole"
    assert (generation.status, generation.cancelled_by) == ("completed", "")


@pytest.mark.slow
@on_redis
async def test_a_stop_sent_6_s_into_an_answer_stops_it_on_redis(api, conversation, upstream):
    upstream.script.chunks = [f" w{i}" for i in range(120)]
    # 12 s in all; the Stop comes after 60 chunks, 6 s in: past the layer's 5 s blocking pop.
    upstream.script.interval_s = 0.1
    stopped, _, rest = await stop_after_deltas(api, conversation, deltas=60, seen_chars=6)
    hung_up = await asyncio.to_thread(upstream.hung_up.wait, 10)

    generation = await sync_to_async(Generation.objects.select_related("message").get)(conversation=conversation)
    assert stopped.status_code == 202
    assert names(rest)[-1] == "done" and rest[-1][1]["status"] == "stopped"
    assert len([name for name in names(rest) if name == "delta"]) < 40
    assert hung_up
    assert generation.message.content == " w0 w1" and generation.cancelled_by == "user"
