"""A session's streams end with it, however it ended (chatapp/streaming/session_ends.py): told by
the view that ended it, or found by the hub's heartbeat read when nobody told (a password changed
in the admin or by `manage.py changepassword`). The two web processes' case, on Redis behind
nginx, is test_sign_out_across_web_processes.py."""

import json

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.test import AsyncClient

from chatapp import selectors, services
from chatapp.models import Generation
from tests.chat.streams import read_events, shown

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("small_login_limits")]

WORDS = [f" w{i}" for i in range(200)]  # 10 s at one each 50 ms: ends long after any heartbeat


@pytest.fixture(autouse=True)
async def connections_closed():
    yield
    # The views and the reads ran queries on asgiref's worker thread: closed, or the test
    # database cannot be dropped at the end.
    await sync_to_async(connections.close_all)()


@pytest.fixture
def quick_heartbeats(settings):
    settings.CHAT_HEARTBEAT_SECONDS = 0.2
    settings.CHAT_WATCH_INTERVAL_SECONDS = 0.05


async def test_a_password_changed_without_the_api_ends_every_sessions_streams_within_a_heartbeat(
        api, user, conversation, upstream, quick_heartbeats):
    upstream.script.chunks, upstream.script.interval_s = WORDS, 0.05
    other_tab = AsyncClient()
    await other_tab.aforce_login(user)
    answer = await api.post(f"/api/conversations/{conversation.pk}/messages", json.dumps({"content": "go"}),
                            content_type="application/json")
    answer_events = answer.streaming_content
    start = await anext(answer_events)
    generation_id = json.loads(start.split(b"data: ", 1)[1])["generation_id"]
    watch = await other_tab.get(f"/api/generations/{generation_id}/events")

    await sync_to_async(services.user_password_change)(user=user, new_password="another-long-passphrase")
    watched = await read_events(watch)
    answered = [chunk async for chunk in answer_events]

    generation = await Generation.objects.aget(pk=generation_id)
    assert watched[-1] == ("error", {"code": "signed_out", "message": watched[-1][1]["message"]})
    assert b'"code": "signed_out"' in answered[-1]
    assert len(shown(watched)) < len("".join(WORDS))
    assert generation.status == "stopped" and generation.cancelled_by == "signed_out"
    assert upstream.hung_up.wait(10)


async def test_a_session_signs_the_user_in_until_it_signs_out_and_is_stale_once_the_password_changes_elsewhere(user):
    here, elsewhere, signed_out = AsyncClient(), AsyncClient(), AsyncClient()
    for browser in (here, elsewhere, signed_out):
        await browser.aforce_login(user)
    key_of = {browser: (await browser.asession()).session_key for browser in (here, elsewhere, signed_out)}
    keys = set(key_of.values())
    read = sync_to_async(selectors.sessions_signed_in)

    before = await read(user_id=user.pk, session_keys=keys)
    await signed_out.post("/api/auth/logout")
    after_the_sign_out = await read(user_id=user.pk, session_keys=keys)
    changed = await here.post("/api/auth/password", json.dumps({"old_password": "a-long-test-password",
                                                                "new_password": "another-long-passphrase"}),
                              content_type="application/json")
    renamed = (await here.asession()).session_key
    after_the_change = await read(user_id=user.pk, session_keys=keys | {renamed})

    assert before == dict.fromkeys(keys, True)
    assert after_the_sign_out == {key_of[here]: True, key_of[elsewhere]: True}
    assert changed.status_code == 200 and after_the_change == {renamed: True, key_of[elsewhere]: False}
    assert await read(user_id=user.pk + 1, session_keys=keys) == {key_of[elsewhere]: False}  # another user's
