"""A generation's status moves only forward: a live answer is never reaped, a finished one never rewritten."""

import asyncio
import json

import pytest
from asgiref.sync import sync_to_async

from django.db import OperationalError, connection

from chatapp import services
from chatapp.models import Generation
from chatapp.runtime.database_outage import outlasting_an_outage
from chatapp.runtime.database_threads import on_database_thread
from chatapp.tasks import fail_interrupted_streams
from common.vocabulary import GenerationStatus
from tests import factories
from tests.chat.database_outage import database_refusing_new_sessions, terminate_the_database_threads_backends
from tests.chat.streams import EventReader, names, read_events, stop_after_deltas, text_of

pytestmark = pytest.mark.django_db(transaction=True)

FINAL = [status for status in GenerationStatus if status.is_final]


def ended_generation(status: GenerationStatus) -> Generation:
    answer = factories.message(role="assistant", status=status.message_status, content="kept")
    return factories.generation(answer, status=status, final_text="kept")


@pytest.mark.parametrize("final", FINAL)
@pytest.mark.parametrize("to", list(GenerationStatus))
def test_nothing_leaves_a_final_status(final, to):
    generation = ended_generation(final)

    with pytest.raises(services.IllegalTransition):
        services.generation_move(generation_id=generation.pk, to=to, final_text="rewritten")

    generation.refresh_from_db()
    assert (generation.status, generation.final_text) == (final, "kept")


def test_a_stop_pressed_while_streaming_waits_for_the_final_write_which_cuts_the_text():
    answer = factories.message(role="assistant", status="streaming")
    generation = factories.generation(answer)

    services.generation_stop(generation=generation, seen_chars=3)
    pending = Generation.objects.select_related("message").get(pk=generation.pk)
    services.generation_finish(generation_id=generation.pk, outcome=services.Outcome(
        text="Hello world", finish_reason="stop"))

    generation.refresh_from_db()
    assert (pending.status, pending.message.status) == ("stop_requested", "streaming")
    assert (generation.status, generation.cancelled_by, generation.final_text) == ("stopped", "user", "Hel")
    assert generation.message.content == "Hel" and generation.message.status == "stopped"


@pytest.mark.parametrize("final", FINAL)
def test_a_stop_after_the_end_is_refused_and_changes_nothing(final):
    generation = ended_generation(final)

    with pytest.raises(services.IllegalTransition):
        services.generation_stop(generation=generation, seen_chars=1)

    generation.refresh_from_db()
    assert (generation.status, generation.cancelled_by, generation.stop_seen_chars) == (final, "", None)


@pytest.mark.parametrize("cancelled_by", ["client_gone", "shutdown", "timeout", "admin", "user"])
def test_only_an_answer_that_ended_for_want_of_a_reader_takes_a_users_late_stop(cancelled_by):
    answer = factories.message(role="assistant", status="stopped", content="Hello world")
    generation = factories.generation(answer, status="stopped", finish_reason="cancelled",
                                      cancelled_by=cancelled_by, final_text="Hello world")

    if cancelled_by == "client_gone":
        services.generation_stop(generation=generation, seen_chars=5)
    else:
        with pytest.raises(services.IllegalTransition):
            services.generation_stop(generation=generation, seen_chars=5)

    generation.refresh_from_db()
    cut = cancelled_by == "client_gone"
    assert generation.final_text == ("Hello" if cut else "Hello world")
    assert generation.cancelled_by == ("user" if cut else cancelled_by)


def test_a_late_stop_of_an_answer_regenerated_since_is_refused():
    answer = factories.message(role="assistant", status="stopped", content="Hello world")
    generation = factories.generation(answer, status="stopped", finish_reason="cancelled",
                                      cancelled_by="client_gone", final_text="Hello world")
    answer.delete()  # a regenerated answer's message is replaced; its audit row stays
    generation.refresh_from_db()

    with pytest.raises(services.IllegalTransition):
        services.generation_stop(generation=generation, seen_chars=5)

    generation.refresh_from_db()
    assert (generation.final_text, generation.cancelled_by) == ("Hello world", "client_gone")


def test_the_final_write_of_an_answer_already_reaped_changes_nothing():
    generation = ended_generation(GenerationStatus.FAILED)

    returned = services.generation_finish(generation_id=generation.pk, outcome=services.Outcome(
        text="the relay's late text", finish_reason="stop"))

    generation.refresh_from_db()
    assert returned.status == generation.status == "failed"
    assert generation.final_text == "kept" and generation.message.content == "kept"


@pytest.mark.slow
async def test_an_answer_that_is_alive_but_silent_is_never_reaped(api, conversation, upstream, settings):
    # Production's margin (a heartbeat every 10 s, stale after 60), shrunk: at 0.05 / 0.3 s a
    # loaded 2-core machine delayed one heartbeat's write past the window, and CI failed.
    settings.CHAT_RELAY_HEARTBEAT_SECONDS = 0.2
    settings.CHAT_STALE_STREAM_SECONDS = 1.2
    upstream.script.chunks = ["Slow", " but", " alive"]
    upstream.script.first_delay_s = 4  # no token for several stale windows
    response = await api.post(f"/api/conversations/{conversation.pk}/messages",
                              json.dumps({"content": "go"}), content_type="application/json")
    reading = asyncio.ensure_future(read_events(response))
    generation = await sync_to_async(Generation.objects.get)(conversation=conversation)

    reaped = []
    while not reading.done():  # the reaper runs again and again while the answer is silent
        reaped.append(await sync_to_async(fail_interrupted_streams)())
        await asyncio.sleep(0.1)
    events = reading.result()

    await sync_to_async(generation.refresh_from_db)()
    assert len(reaped) > 5 and sum(reaped) == 0
    assert events[-1][1]["status"] == "completed"
    assert generation.status == "completed" and generation.final_text == "Slow but alive"


async def test_a_broken_channel_layer_is_no_stop_and_a_stop_still_works_through_the_row(
        api, conversation, upstream, settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "tests.fakes.failing_channel_layer.FailingChannelLayer"}}
    settings.CHAT_RELAY_HEARTBEAT_SECONDS = 0.05
    upstream.script.chunks = [f" w{i}" for i in range(60)]
    upstream.script.interval_s = 0.05
    # By the fifth delta the listener has long failed: the answer must still be streaming.
    stopped, before, rest = await stop_after_deltas(api, conversation, deltas=5, seen_chars=6)

    generation = await sync_to_async(Generation.objects.get)(conversation=conversation)
    assert "done" not in [e.event for e in before]
    assert stopped.status_code == 202
    assert names(rest)[-1] == "done" and rest[-1][1]["status"] == "stopped"
    assert (generation.status, generation.cancelled_by, generation.final_text) == ("stopped", "user", " w0 w1")


async def test_a_stop_listener_whose_reads_time_out_as_redis_py_does_keeps_listening(
        api, conversation, upstream, settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "tests.fakes.failing_channel_layer.TimingOutChannelLayer"}}
    settings.CHAT_RELAY_HEARTBEAT_SECONDS = 3600  # only the channel can bring the Stop in time
    upstream.script.chunks = [f" w{i}" for i in range(60)]
    upstream.script.interval_s = 0.05

    stopped, _, rest = await stop_after_deltas(api, conversation, deltas=5, seen_chars=6)

    generation = await sync_to_async(Generation.objects.get)(conversation=conversation)
    assert stopped.status_code == 202
    assert names(rest)[-1] == "done" and names(rest).count("delta") < 50
    assert (generation.status, generation.cancelled_by, generation.final_text) == ("stopped", "user", " w0 w1")


async def read_to_its_second_delta(api, conversation) -> EventReader:
    """An answer asked for and read until its second delta (the relay's read after the first is
    done): its reader."""
    response = await api.post(f"/api/conversations/{conversation.pk}/messages",
                              json.dumps({"content": "go"}), content_type="application/json")
    answer = EventReader(response)
    await answer.until(lambda events: names(events).count("delta") >= 2)
    return answer


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a server that drops connections")
async def test_an_answer_whose_database_connections_were_dropped_mid_stream_is_still_stored(
        api, conversation, upstream, settings):
    settings.CHAT_SAVE_INTERVAL_SECONDS = 3600  # the final write is the first to meet a dead connection
    settings.CHAT_RELAY_HEARTBEAT_SECONDS = 3600
    upstream.script.chunks = ["Kept", " despite", " a", " restart"]
    upstream.script.interval_s = 0.2
    answer = await read_to_its_second_delta(api, conversation)

    dropped = await sync_to_async(terminate_the_database_threads_backends)()
    after = await answer.to_the_end()

    generation = await sync_to_async(Generation.objects.select_related("message").get)(conversation=conversation)
    assert dropped >= 1
    assert after[-1][0] == "done" and after[-1][1]["status"] == "completed"
    assert generation.status == "completed" and generation.message.content == "Kept despite a restart"


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a server that refuses sessions")
@pytest.mark.parametrize("interval_s", [0.05, 0], ids=["chunks apart", "chunks together"])
async def test_an_answer_that_ends_while_the_database_is_down_is_stored_once_it_is_back(
        interval_s, api, conversation, upstream, settings):
    settings.CHAT_SAVE_INTERVAL_SECONDS = 3600  # the final write is the first to need the database
    settings.CHAT_RELAY_HEARTBEAT_SECONDS = 3600
    settings.CHAT_HEARTBEAT_SECONDS = 0.5  # far longer than between two deltas
    upstream.script.chunks = ["Kept", " through", " an", " outage"]
    upstream.script.interval_s = interval_s
    answer = await read_to_its_second_delta(api, conversation)

    with database_refusing_new_sessions():
        await sync_to_async(terminate_the_database_threads_backends)()
        # The answer ends during the outage; the page hears the stream is alive while it waits.
        # Its whole text, in however many deltas: chunks that reach the relay together go out as
        # one, and a count of four deltas then never came while the outage waited for it.
        await answer.until(lambda events: text_of(events) == "Kept through an outage"
                           and events[-1] == ("ping", None))
    after = await answer.to_the_end()

    generation = await sync_to_async(Generation.objects.select_related("message").get)(conversation=conversation)
    assert after[-1][0] == "done" and after[-1][1]["status"] == "completed"
    assert generation.status == "completed" and generation.message.content == "Kept through an outage"


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a server that refuses sessions")
async def test_an_answer_whose_final_write_outlasts_the_patience_ends_with_an_error_event(
        api, conversation, upstream, settings):
    """The stream had ended cut short, which the page took for a lost connection to resume."""
    settings.CHAT_DATABASE_PATIENCE_SECONDS = 0.5
    settings.CHAT_SAVE_INTERVAL_SECONDS = 3600
    settings.CHAT_RELAY_HEARTBEAT_SECONDS = 3600
    upstream.script.chunks = ["Held", " by", " the", " page"]
    upstream.script.interval_s = 0.05
    answer = await read_to_its_second_delta(api, conversation)

    with database_refusing_new_sessions():
        await sync_to_async(terminate_the_database_threads_backends)()
        after = await answer.to_the_end()

    assert names(after)[-1] == "error" and "done" not in names(after)
    assert after[-1][1]["code"] == "database_unavailable"


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a server that refuses sessions")
def test_a_final_write_the_database_refuses_past_the_patience_raises_the_refusal(settings):
    settings.CHAT_DATABASE_PATIENCE_SECONDS = 0.5
    generation = factories.generation(factories.message(role="assistant", status="streaming"))
    finish = on_database_thread(services.generation_finish)
    outcome = services.Outcome(text="never stored", finish_reason="stop")

    with database_refusing_new_sessions(), pytest.raises(OperationalError):
        terminate_the_database_threads_backends()  # on the test's own session, which goes on
        asyncio.run(outlasting_an_outage(lambda: finish(generation_id=generation.pk, outcome=outcome),
                                         "a final write"))

    generation.refresh_from_db()
    assert generation.status == "streaming"
