"""A user's places among the answers streaming at once (CHAT_MAX_STREAMS_PER_USER): each start
claims one before anything goes upstream (chatapp/services/stream_claims.py), so that of two
starts at once for the last place one is refused without an upstream request, and a start that
is refused or abandoned gives its place back at once."""

import asyncio
import threading
import uuid
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.utils import timezone

from chatapp.models import StreamClaim
from chatapp.services import stream_claims
from harness import waiting
from tests import factories
from tests.chat.start_races import ROW_LOCKS, another_answer_said, post, upstream_requested, user_row_locked
from tests.chat.streams import Browser, read_events

pytestmark = pytest.mark.django_db(transaction=True)


async def test_of_two_starts_at_once_with_one_stream_left_only_one_goes_upstream(api, user, upstream, settings):
    """The stream limit was checked by a read, and again under the user's lock at the write: two
    starts at once both read a place free and both opened their upstream request."""
    settings.CHAT_MAX_STREAMS_PER_USER = 1
    upstream.script.head_held = threading.Event()  # the upstream answers once both are decided
    first, second = await sync_to_async(lambda: (factories.conversation(owner=user),
                                                 factories.conversation(owner=user)))()
    sending = [asyncio.ensure_future(post(api, f"/api/conversations/{c.pk}/messages", {"content": "hi"}))
               for c in (first, second)]

    await asyncio.wait(sending, timeout=10, return_when=asyncio.FIRST_COMPLETED)  # one refused at once
    upstream.script.head_held.set()
    responses = await asyncio.gather(*sending)
    for response in responses:
        if response.status_code == 200:
            await read_events(response)

    assert sorted((r.status_code, r.json()["error"]["code"] if r.status_code != 200 else "")
                  for r in responses) == [(200, ""), (429, "too_many_streams")]
    assert len(upstream.requests) == 1


@pytest.mark.parametrize("refusal", ["upstream", "write"])
async def test_a_start_refused_after_claiming_its_place_gives_it_back_at_once(
        api, user, conversation, upstream, settings, refusal):
    settings.CHAT_MAX_STREAMS_PER_USER = 1
    upstream.script.status = 500
    if refusal == "write":  # the conversation changes while the upstream is asked: refused at the write
        upstream.script.status, upstream.script.head_held = 200, threading.Event()
    sending = asyncio.ensure_future(post(api, f"/api/conversations/{conversation.pk}/messages", {"content": "a"}))
    if refusal == "write":
        await upstream_requested(upstream)
        await sync_to_async(another_answer_said)(conversation)
        upstream.script.head_held.set()
    refused = await sending
    upstream.script.status, upstream.script.head_held = 200, None

    streamed = await post(api, f"/api/conversations/{conversation.pk}/messages", {"content": "b"})

    await read_events(streamed)
    assert refused.status_code in (409, 502) and streamed.status_code == 200


async def test_a_place_claimed_by_a_web_process_that_died_mid_start_is_free_again_after_its_lifetime(
        api, user, conversation, upstream, settings):
    settings.CHAT_MAX_STREAMS_PER_USER = 1
    await sync_to_async(StreamClaim.objects.create)(
        request_id=uuid.uuid4(), user=user, claimed_at=timezone.now() - StreamClaim.LIFETIME - timedelta(seconds=1))

    streamed = await post(api, f"/api/conversations/{conversation.pk}/messages", {"content": "hi"})

    await read_events(streamed)
    assert streamed.status_code == 200
    assert await sync_to_async(StreamClaim.objects.count)() == 0  # gone with the next start's own


@ROW_LOCKS
async def test_a_browser_that_leaves_while_its_place_is_claimed_gives_the_place_back(
        api, user, conversation, upstream, settings):
    settings.CHAT_MAX_STREAMS_PER_USER = 1
    browser = Browser(api, f"/api/conversations/{conversation.pk}/messages")
    with user_row_locked(user, lock=lambda: stream_claims.one_claim_at_a_time(user.pk)) as release:
        await browser.send({"content": "a"})
        await asyncio.to_thread(waiting.wait_until, _a_claim_waits, 10, "the start's claim waiting on the lock")
        await browser.app.send_input({"type": "http.disconnect"})  # heard at the test's next await,
        release.set()  # long before the claim, made now in another thread, is committed
    await browser.app.wait(timeout=10)  # the view's end, once it gave back its place

    streamed = await post(api, f"/api/conversations/{conversation.pk}/messages", {"content": "b"})

    assert streamed.status_code == 200
    await read_events(streamed)
    assert len(upstream.requests) == 1


def _a_claim_waits() -> bool:
    try:
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
            return cursor.fetchone()[0] > 0
    finally:
        connections.close_all()  # this thread's own
