"""A session's streams end with it, however it ended (chatapp/streaming/session_ends.py): told by
the sign-out, or by a password change wherever it was made (our API, the admin, `manage.py
changepassword`: chatapp/streaming/session_end_signals.py), or found by the hub's heartbeat read
when nobody told. The two web processes' case, on Redis behind nginx, is
test_sign_out_across_web_processes.py."""

import asyncio
import json
import os
import subprocess
import sys
import threading

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.db import connections
from django.test import AsyncClient

from chatapp import selectors
from chatapp.models import Generation
from chatapp.streaming import session_ends
from harness.child_process import REPO_DIR
from tests import factories, servers
from tests.chat.redis_restart import joined_at
from tests.chat.streams import EventReader, names, read_events, shown, text_of

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("small_login_limits")]

WORDS = [f" w{i}" for i in range(200)]  # 10 s at one each 50 ms: ends long after any heartbeat
# How long a stream told of its session's end may take to end before the test fails: a deadline
# for a stream nobody told (the heartbeat is ten minutes away), not a measure of the telling.
TOLD_WITHIN_S = 20


# The hub's membership is read on Redis, and `manage.py` tells the test's process through it.
on_redis = pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="the channel layer on Redis: REDIS_URL")


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


@pytest.fixture
def slow_heartbeats(settings):
    """No heartbeat read while a test runs: a stream that ends was told."""
    settings.CHAT_HEARTBEAT_SECONDS = 600


@pytest.fixture
def gated(upstream):
    """An answer of three chunks, each after the first sent once the test releases it."""
    upstream.script.chunks, upstream.script.gate = ["one", " two", " three"], threading.Semaphore(0)
    return upstream.script.gate


async def answer_and_watch(asker: AsyncClient, watcher: AsyncClient, conversation, settings):
    """The asker's answer and the watcher's watch stream of it, both streaming and watching their
    sessions (the hub of the user's streams a member of its group): (the generation id, the
    answer's reader, the watch's reader)."""
    answer = EventReader(await asker.post(f"/api/conversations/{conversation.pk}/messages",
                                          json.dumps({"content": "go"}), content_type="application/json"))
    await answer.until(lambda events: "delta" in names(events))
    generation_id = answer.events[0][1]["generation_id"]
    watch = EventReader(await watcher.get(f"/api/generations/{generation_id}/events"))
    await watch.until(lambda events: "prefix" in names(events))
    await joined_at(settings.REDIS_URL, session_ends.user_group(conversation.owner_id))
    return generation_id, answer, watch


def signed_out(events) -> bool:
    return events[-1][0] == "error" and events[-1][1]["code"] == "signed_out"


# What the admin does in one browser: its request, its answer's status, and whose streams end.
ENDED_IN_THE_ADMIN = {
    # The password, changed: this session stays signed in, the other one ends.
    "a password change": (lambda staff: f"/admin/auth/user/{staff.pk}/password/", {
        "usable_password": "true", "password1": "another-long-passphrase", "password2": "another-long-passphrase"},
        302, "the other"),
    "a sign-out": (lambda staff: "/admin/logout/", {}, 200, "its own"),
}


@on_redis
@pytest.mark.parametrize("ending", ENDED_IN_THE_ADMIN)
async def test_a_session_ended_in_the_admin_ends_its_streams_at_once_and_not_the_other_sessions(
        transactional_db, upstream, gated, slow_heartbeats, settings, ending):
    path_of, form, status, whose = ENDED_IN_THE_ADMIN[ending]
    staff = await sync_to_async(factories.user)(is_staff=True, is_superuser=True)
    conversation = await sync_to_async(factories.conversation)(owner=staff)
    here, elsewhere = AsyncClient(), AsyncClient()
    for browser in (here, elsewhere):
        await browser.aforce_login(staff)
    ended, kept = (here, elsewhere) if whose == "its own" else (elsewhere, here)
    _, answer, watch = await answer_and_watch(kept, ended, conversation, settings)

    done_in_the_admin = await here.post(path_of(staff), form)
    async with asyncio.timeout(TOLD_WITHIN_S):
        watched = await watch.to_the_end()
    gated.release(2)
    answered = await answer.to_the_end()

    assert done_in_the_admin.status_code == status and signed_out(watched)
    assert answered[-1][0] == "done" and text_of(answered) == "one two three"
    assert (await kept.get("/api/conversations")).status_code == 200


@on_redis
async def test_a_staff_member_who_changes_another_users_password_in_the_admin_keeps_their_own_streams(
        transactional_db, quick_heartbeats, settings):
    staff = await sync_to_async(factories.user)(is_staff=True, is_superuser=True)
    user = await sync_to_async(factories.user)()
    admin_page, users_tab = AsyncClient(), AsyncClient()
    ended, watches = {staff.pk: asyncio.Event(), user.pk: asyncio.Event()}, {}
    for browser, owner in ((admin_page, staff), (users_tab, user)):
        await browser.aforce_login(owner)
        key = browser.cookies[settings.SESSION_COOKIE_NAME].value
        watches[owner.pk] = session_ends.watch(owner.pk, key, ended[owner.pk].set)  # as a stream does
        await joined_at(settings.REDIS_URL, session_ends.user_group(owner.pk))
    try:
        changed = await admin_page.post(f"/admin/auth/user/{user.pk}/password/", {
            "usable_password": "true", "password1": "another-long-passphrase", "password2": "another-long-passphrase"})
        renamed = admin_page.cookies[settings.SESSION_COOKIE_NAME].value  # update_session_auth_hash's new key
        async with asyncio.timeout(TOLD_WITHIN_S):
            await ended[user.pk].wait()
            # Its old key gone, the staff member's watch follows the new one or ends (gone twice).
            while watches[staff.pk].session_key != renamed and not ended[staff.pk].is_set():
                await asyncio.sleep(0.01)
    finally:
        for watch in watches.values():
            watch.close()

    assert changed.status_code == 302 and ended[user.pk].is_set()
    assert not ended[staff.pk].is_set() and watches[staff.pk].session_key == renamed


@on_redis
@pytest.mark.process
async def test_a_password_changed_by_manage_py_changepassword_ends_every_sessions_streams_at_once(
        api, user, conversation, upstream, gated, slow_heartbeats, settings):
    other_tab = AsyncClient()
    await other_tab.aforce_login(user)
    generation_id, answer, watch = await answer_and_watch(api, other_tab, conversation, settings)

    changed = await asyncio.to_thread(
        subprocess.run, [sys.executable, "manage.py", "changepassword", user.username], cwd=REPO_DIR,
        env={**os.environ, "DATABASE_URL": servers.shared_database_url(), "DJANGO_SETTINGS_MODULE": "tests.settings"},
        # No terminal: getpass reads the password twice from stdin.
        input=b"another-long-passphrase\n" * 2, capture_output=True, start_new_session=True, timeout=60)
    async with asyncio.timeout(TOLD_WITHIN_S):
        watched, answered = await watch.to_the_end(), await answer.to_the_end()

    generation = await Generation.objects.aget(pk=generation_id)
    assert changed.returncode == 0, changed.stderr.decode()
    assert signed_out(watched) and signed_out(answered)
    assert generation.status == "stopped" and generation.cancelled_by == "signed_out"


async def test_a_password_changed_where_nobody_tells_ends_every_sessions_streams_within_a_heartbeat(
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

    # A queryset's update sends no signal: only the heartbeat's read finds the sessions stale.
    await get_user_model().objects.filter(pk=user.pk).aupdate(password=make_password("another-long-passphrase"))
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
