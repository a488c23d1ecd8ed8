"""Nothing the user saw is lost when a web process dies between two partial saves: every delta
comes with a proof of its piece, and the page hands back what the stored text lacks."""

import json
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient
from django.utils import timezone

from chatapp.models import Generation, Message
from chatapp.streaming.text_proof import TextProof
from chatapp.tasks import fail_interrupted_streams
from tests import factories
from tests.chat.streams import EventReader, read_events, text_of

pytestmark = pytest.mark.django_db(transaction=True)


async def post(client, url, body=None):
    return await client.post(url, json.dumps(body or {}), content_type="application/json")


def pieces_of(events, generation_id: int) -> list[dict]:
    """Each delta as the page keeps it: its offset, its text and its proof."""
    pieces, offset = [], 0
    for name, payload in events:
        if name == "delta":
            pieces.append({"offset": offset, "text": payload["text"], "proof": payload["proof"]})
            offset += len(payload["text"])
    return pieces


def interrupted(generation_id: int, kept: str) -> None:
    """What the reaper leaves of an answer whose web process died after saving `kept`."""
    generation = Generation.objects.select_related("message").get(pk=generation_id)
    Generation.objects.filter(pk=generation_id).update(
        status="failed", finish_reason="error", error_code="interrupted", final_text=kept,
        error_message="the stream was interrupted and its relay is gone")
    Message.objects.filter(pk=generation.message_id).update(status="failed", content=kept)


def an_interrupted_answer(owner, kept: str) -> Generation:
    answer = factories.message(factories.conversation(owner=owner), role="assistant",
                               status="failed", content=kept)
    return factories.generation(answer, finish_reason="error", error_code="interrupted", final_text=kept)


def an_orphaned_answer(owner, saved: str) -> Generation:
    """An answer still `streaming` whose relay died after saving `saved`: the reaper's next."""
    answer = factories.message(factories.conversation(owner=owner), role="assistant",
                               status="streaming", content=saved)
    return factories.generation(answer, final_text=saved, heartbeat_at=timezone.now() - timedelta(hours=1))


def proven(generation: Generation, *pieces: tuple[int, str]) -> dict:
    proof = TextProof(generation.pk)
    return {"pieces": [{"offset": offset, "text": text, "proof": proof.of(offset, text)}
                       for offset, text in pieces]}


def stored(generation: Generation) -> tuple[str, str]:
    generation.refresh_from_db()
    return generation.final_text, Message.objects.get(pk=generation.message_id).content


async def test_every_delta_carries_a_proof_of_its_piece_at_its_offset(api, conversation, upstream):
    upstream.script.chunks = ["Hel", "lo, ", "wörld", " 🐉!"]

    events = await read_events(await post(api, f"/api/conversations/{conversation.pk}/messages",
                                          {"content": "hi"}))

    generation_id = dict(events)["done"]["generation_id"]
    pieces = pieces_of(events, generation_id)
    proof = TextProof(generation_id)
    assert "".join(piece["text"] for piece in pieces) == "Hello, wörld 🐉!"
    assert all(proof.holds(piece["offset"], piece["text"], piece["proof"]) for piece in pieces)
    assert not TextProof(generation_id + 1).holds(0, "Hel", pieces[0]["proof"])
    assert not proof.holds(1, "Hel", pieces[0]["proof"]) and not proof.holds(0, "Hem", pieces[0]["proof"])


async def test_a_resumed_streams_deltas_are_proven_at_the_offset_it_resumed_from(api, user):
    generation = await sync_to_async(an_interrupted_answer)(user, "Hello, world")

    events = await read_events(await api.get(f"/api/generations/{generation.pk}/events?from=5"))

    delta = dict(events)["delta"]
    assert delta["text"] == ", world"
    assert TextProof(generation.pk).holds(5, ", world", delta["proof"])


async def test_the_text_a_page_was_sent_is_kept_when_its_relay_died_before_saving_it(
        api, conversation, upstream):
    upstream.script.chunks = ["Once", " upon", " a", " time"]
    events = await read_events(await post(api, f"/api/conversations/{conversation.pk}/messages",
                                          {"content": "a story"}))
    generation_id = dict(events)["done"]["generation_id"]
    await sync_to_async(interrupted)(generation_id, "Once up")  # saved mid-delta, then the crash

    response = await post(api, f"/api/generations/{generation_id}/recover",
                          {"pieces": pieces_of(events, generation_id)})

    generation = await sync_to_async(Generation.objects.get)(pk=generation_id)
    assert response.status_code == 200 and response.json()["text_length"] == len("Once upon a time")
    assert await sync_to_async(stored)(generation) == ("Once upon a time", "Once upon a time")
    assert (generation.status, generation.error_code) == ("failed", "interrupted")
    assert generation.error_message.endswith("; its page handed back 9 characters it was shown")


async def test_a_resume_of_an_answer_still_written_says_how_much_of_its_text_is_stored(api, user):
    generation = await sync_to_async(an_orphaned_answer)(user, "Hello")

    resumed = EventReader(await api.get(f"/api/generations/{generation.pk}/events?from=12"))
    await resumed.until(lambda events: len(events) > 0)

    assert resumed.events[0][0] == "resume"
    assert (resumed.events[0][1]["offset"], resumed.events[0][1]["stored_chars"]) == (12, 5)


async def test_what_a_page_hands_back_of_an_answer_whose_relay_died_is_kept_when_the_reaper_ends_it(api, user):
    generation = await sync_to_async(an_orphaned_answer)(user, "Hello")

    response = await post(api, f"/api/generations/{generation.pk}/recover", proven(generation, (5, ", world")))
    handed_back = await sync_to_async(stored)(generation)
    reaped = await sync_to_async(fail_interrupted_streams)()

    assert response.status_code == 200 and handed_back == ("Hello, world", "Hello, world")
    assert reaped == 1 and await sync_to_async(stored)(generation) == ("Hello, world", "Hello, world")
    assert (generation.status, generation.error_code) == ("failed", "interrupted")


@pytest.mark.parametrize("stop_first", [True, False], ids=["stop, then hand back", "hand back, then stop"])
async def test_a_stop_pressed_while_the_reaper_is_awaited_keeps_all_its_user_saw_of_the_handed_back_text(
        api, user, stop_first):
    generation = await sync_to_async(an_orphaned_answer)(user, "Hello")
    stop = lambda: post(api, f"/api/generations/{generation.pk}/stop", {"seen_chars": 9})  # noqa: E731
    hand_back = lambda: post(api, f"/api/generations/{generation.pk}/recover",  # noqa: E731
                             proven(generation, (5, ", world")))

    responses = [await stop(), await hand_back()] if stop_first else [await hand_back(), await stop()]
    reaped = await sync_to_async(fail_interrupted_streams)()

    assert sorted(response.status_code for response in responses) == [200, 202]
    assert reaped == 1 and await sync_to_async(stored)(generation) == ("Hello, wo", "Hello, wo")
    assert (generation.status, generation.cancelled_by) == ("stopped", "user")


@pytest.mark.parametrize("pieces, status, code, text", [
    ([(0, "Hello"), (5, ", world")], 200, None, "Hello, world"),
    ([(3, "lo, world")], 200, None, "Hello, world"),
    ([(0, "Hel")], 200, None, "Hello"),  # nothing past the stored text: nothing changes
    ([(5, ", world")], 200, None, "Hello, world"),
    ([(6, "world")], 400, "invalid_value", "Hello"),  # a gap after character 5
    ([(0, "Jello, world")], 409, "text_differs", "Hello"),
])
async def test_pieces_join_the_stored_text_where_they_agree_with_it(api, user, pieces, status, code, text):
    generation = await sync_to_async(an_interrupted_answer)(user, "Hello")

    response = await post(api, f"/api/generations/{generation.pk}/recover", proven(generation, *pieces))

    assert response.status_code == status
    assert response.json().get("error", {}).get("code") == code
    assert await sync_to_async(stored)(generation) == (text, text)


async def test_a_piece_the_server_did_not_send_is_refused_and_changes_nothing(api, user):
    generation = await sync_to_async(an_interrupted_answer)(user, "Hello")
    forged = proven(generation, (5, ", world"))
    forged["pieces"][0]["text"] = ", WORLD"

    response = await post(api, f"/api/generations/{generation.pk}/recover", forged)

    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_proof"
    assert await sync_to_async(stored)(generation) == ("Hello", "Hello")


async def test_only_an_interrupted_answer_of_ones_own_not_continued_since_takes_back_text(api, user, other_user):
    def answers():
        completed = factories.generation(factories.message(factories.conversation(owner=user),
                                                           role="assistant", content="Hello"),
                                         finish_reason="stop", final_text="Hello")
        continued = an_interrupted_answer(user, "Hello")
        Message.objects.filter(pk=continued.message_id).update(status="truncated")
        factories.generation(continued.message, finish_reason="length", final_text=" again")
        return completed, continued, an_interrupted_answer(other_user, "Hello")
    completed, continued, theirs = await sync_to_async(answers)()

    refusals = [await post(api, f"/api/generations/{generation.pk}/recover",
                           proven(generation, (5, ", world")))
                for generation in (completed, continued, theirs)]
    signed_out = await post(AsyncClient(), f"/api/generations/{completed.pk}/recover",
                            proven(completed, (5, ", world")))

    assert [(r.status_code, r.json()["error"]["code"]) for r in refusals] == [
        (409, "not_interrupted"), (409, "answer_continued"), (404, "not_found")]
    assert signed_out.status_code in (401, 403)
    assert await sync_to_async(stored)(completed) == ("Hello", "Hello")


@pytest.mark.parametrize("body", [{}, {"pieces": []}, {"pieces": "x"}, {"pieces": [{"offset": 0}]},
                                  {"pieces": [{"offset": -1, "text": "a", "proof": "b"}]},
                                  {"pieces": [{"offset": True, "text": "a", "proof": "b"}]},
                                  {"pieces": [{"offset": 0, "text": "", "proof": "b"}]},
                                  {"pieces": [{"offset": 0, "text": "a", "proof": 7}]}])
async def test_pieces_of_the_wrong_shape_are_a_clear_400(api, user, body):
    generation = await sync_to_async(an_interrupted_answer)(user, "Hello")

    response = await post(api, f"/api/generations/{generation.pk}/recover", body)

    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_value"
