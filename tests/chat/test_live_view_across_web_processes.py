"""The live view shows an answer held by another daphne process, and its Stop ends it.

The answer streams from the first web process; the admin's live view and Stop go to the second
(each process reached directly, so by construction), which shares only the database and the
channel layer on Redis with the first.
"""

import os
import time

import pytest

from chatapp.models import Generation
from common.sse import SSEParser
from tests import factories
from tests.chat.streams import shown
from tests.chat.test_stop_across_web_processes import CHUNKS, events_of, two_web_processes  # noqa: F401

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="processes share a channel layer only on Redis"),
]


def listed(live_events, generation_id: int, until, timeout_s: float = 20) -> dict | None:
    """The generation's row (None: not listed) in the first `live` event where `until(row)` holds."""
    deadline = time.monotonic() + timeout_s
    for name, payload in live_events:
        row = next((s for s in payload.get("streams", []) if s["generation_id"] == generation_id), None)
        if name == "live" and until(row):
            return row
        if time.monotonic() > deadline:
            raise AssertionError(f"no live event in {timeout_s} s where the generation's row is as awaited")
    raise AssertionError("the live events ended")


def test_the_live_view_shows_an_answer_held_by_the_other_web_process_and_its_stop_ends_it(
        two_web_processes, user, conversation, upstream):
    upstream.script.chunks = CHUNKS
    upstream.script.interval_s = 0.1
    first, second = two_web_processes.process_urls
    with two_web_processes.browser(user, first) as asker, \
            two_web_processes.browser(factories.staff_member(), second) as admin, \
            asker.stream("POST", f"/api/conversations/{conversation.pk}/messages", json={"content": "go"}) as answer:
        answered = events_of(answer, SSEParser())
        generation_id = next(answered)[1]["generation_id"]
        with admin.stream("GET", "/api/staff/live/events") as live:
            live_events = events_of(live, SSEParser())
            seen = listed(live_events, generation_id, lambda row: row and row["chars_so_far"] > 0)
            stop = admin.post(f"/api/staff/generations/{generation_id}/stop")
            answered = list(answered)
            gone = listed(live_events, generation_id, lambda row: row is None)

    generation = Generation.objects.select_related("message").get(pk=generation_id)
    assert seen["username"] == user.username and seen["conversation_id"] == conversation.pk
    assert seen["status"] == "streaming" and seen["age_s"] >= 0
    assert stop.status_code == 202 and gone is None
    assert answered[-1][0] == "done" and answered[-1][1]["status"] == "stopped"
    assert generation.cancelled_by == "admin" and generation.finish_reason == "cancelled"
    # The user keeps every character they were sent: nobody told the server what they saw.
    assert generation.message.content == shown(answered) and len(shown(answered)) < len("".join(CHUNKS))
    assert upstream.hung_up.wait(10)
