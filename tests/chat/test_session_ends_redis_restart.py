"""A user's sessions hub (chatapp/streaming/session_ends.py) that was listening when Redis
restarted hears a session's end told over the channel again, not only at its heartbeat.

Found when the crowds probe's Redis-restart mending (live_hub.py, relay_inbox.py) met the
sessions hub written beside it: its receive failed once at the restart and was never asked
again, and the restarted Redis had forgotten its member of the user's group, so a sign-out
reached that process's streams only at the next heartbeat (15 s by default).
"""

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.contrib.sessions.backends.db import SessionStore
from django.db import connections
from django.test import AsyncClient

from chatapp.streaming import session_ends
from tests.chat.redis_restart import joined, sent_until_heard

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]  # a redis-server of its own


@pytest.fixture(autouse=True)
async def connections_closed():
    yield
    await sync_to_async(connections.close_all)()  # the hub's reads ran on a worker thread


async def test_a_sessions_hub_listening_when_redis_restarted_hears_a_sign_out_again(
        restartable_redis, settings, user):
    settings.CHAT_HEARTBEAT_SECONDS = 3600  # only the channel can tell it
    browser = AsyncClient()
    await browser.aforce_login(user)
    session_key = browser.cookies[settings.SESSION_COOKIE_NAME].value
    ended = asyncio.Event()
    watch = session_ends.watch(user.pk, session_key, ended.set)
    try:
        await joined(restartable_redis, session_ends.user_group(user.pk))

        restartable_redis.stop()
        restartable_redis.start()  # empty: the hub's member of the group is gone with it
        await sync_to_async(SessionStore(session_key).delete)()  # signed out

        await sent_until_heard(
            lambda: session_ends.get_channel_layer().group_send(
                session_ends.user_group(user.pk), {"type": session_ends.ENDED}),
            ended.wait, "the sign-out", wait_s=0.2 + session_ends.CONFIRM_SECONDS)
    finally:
        watch.close()

    assert ended.is_set()
