"""A session's end, as its streams hear it: an answer's relay and a watch stream stop sending to a
session that signed out (ours, chatapp/auth_api.py, or the admin's), or that a password change in
another browser or the admin ended, within a heartbeat and mostly within a second, in whichever
web process holds them.

A session's end is no event Django keeps: a sign-out deletes the session, and a password change
leaves every other session a stale hash that auth.get_user refuses at its next request. So every
sign-out and every password change, wherever it is made (session_end_signals.py: our API, the
admin, `manage.py changepassword`), tell the user's group on the channel layer
(`tell_sessions_ended`), and each web process with streams of that user has one hub for them
(one channel in the group, as live_hub.py has one per answer): told, or every heartbeat in case
the message was lost (a Redis restarted, a password written where no signal is sent), it reads
which of its streams' sessions still sign the user in (selectors.sessions_signed_in, one read
for all) and calls back those whose session ended (a session gone, found so twice
CONFIRM_SECONDS apart). What a stream then does is its own: a watch stream ends, an answer
stops (relay.py).
"""

import asyncio
import contextlib
import logging
from collections.abc import Callable

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
# redis-py's read timeout is its own class, not Python's TimeoutError.
from redis.exceptions import TimeoutError as RedisTimeoutError

from .. import selectors
from ..runtime.database_outage import log_failure
from ..runtime.database_threads import on_database_thread
from ..runtime.held_tasks import held_until_done
from ..runtime.per_loop import per_loop
from . import live_channel

logger = logging.getLogger(__name__)
ENDED = "user.sessions_ended"
# How long after a read found a session gone it is read again, its streams ending only then:
# a message renaming it is on its way meanwhile, if any (_UserHub._keep).
CONFIRM_SECONDS = 0.5
_hubs = per_loop(dict)  # user id -> the hub of this process's streams of that user


def user_group(user_id: int) -> str:
    return f"user-sessions-{user_id}"


def tell_sessions_ended(user_id: int, renamed: tuple[str | None, str | None] | None = None) -> None:
    """After a session of the user ended: every process checks its streams of the user, told in
    a task of its own on an event loop (the sign-out's answer waits on nothing), or before this
    returns from sync code with no loop of its own (`manage.py changepassword`, a sync request);
    a failure is logged, and the hubs' heartbeat finds the ended session. `renamed` (old key,
    new key): the session that changed the password goes on under a new key (Django's
    update_session_auth_hash cycles it), and so do its streams."""
    message = {"type": ENDED, **({"renamed": list(renamed)} if renamed else {})}
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        async_to_sync(_tell)(user_id, message)
    else:
        held_until_done(_tell(user_id, message))


async def _tell(user_id: int, message: dict) -> None:
    try:
        async with asyncio.timeout(live_channel.LAYER_WITHIN_SECONDS):
            await live_channel.once_more_if_lost(
                lambda: get_channel_layer().group_send(user_group(user_id), message))
    except Exception:
        logger.exception("telling the streams of user %s that a session ended failed", user_id)


class SessionWatch:
    """One stream's watch on its session: `on_end` is called once, on the event loop, when the
    session no longer signs the user in. Closed when the stream ends."""

    def __init__(self, hub: "_UserHub", session_key: str, on_end: Callable[[], None]):
        self.session_key, self.ended = session_key, False
        self.missing = False  # found gone once: ends if found so again (_UserHub._keep)
        self._hub, self._on_end = hub, on_end

    def end(self) -> None:
        if not self.ended:
            self.ended = True
            self._on_end()

    def close(self) -> None:
        self._hub.remove(self)


def watch(user_id: int, session_key: str | None, on_end: Callable[[], None]) -> SessionWatch:
    """Watches the session `session_key` of user `user_id` for its end; waits on nothing (the
    hub joins the group in its own task: an answer's first token does not wait for it)."""
    hubs = _hubs()
    hub = hubs.get(user_id)
    if hub is None:
        hub = hubs[user_id] = _UserHub(user_id, hubs)
    session = SessionWatch(hub, session_key or "", on_end)
    hub.add(session)
    return session


class _UserHub:
    def __init__(self, user_id: int, hubs: dict):
        self.user_id, self._hubs = user_id, hubs  # its loop's hubs, which it leaves when closed
        self._watches: set[SessionWatch] = set()
        self._due = asyncio.Event()  # told, or joined: the sessions are read at once
        self._layer = get_channel_layer()
        self._channel: str | None = None
        self._tasks = [asyncio.create_task(self._listen()), asyncio.create_task(self._keep())]

    def add(self, session: SessionWatch) -> None:
        self._watches.add(session)

    def remove(self, session: SessionWatch) -> None:
        if session not in self._watches:
            return  # closed twice
        self._watches.discard(session)
        if not self._watches:  # the last one: the hub closes, and a later stream makes another
            if self._hubs.get(self.user_id) is self:
                del self._hubs[self.user_id]
            for task in self._tasks:
                task.cancel()
            if self._channel is not None:  # leaving the group, awaited by nobody
                held_until_done(self._leave(self._channel))

    async def _listen(self) -> None:
        """Joins the user's group (and again every live_channel.REJOIN_SECONDS: a Redis restarted
        empty forgets its members), then wakes the keeper at each message, listening again after
        a layer that failed (its connections from before a restart fail once each); the keeper
        reads the sessions every heartbeat meanwhile. A session may have ended before the join:
        the keeper reads them all once joined."""
        self._channel = await self._layer.new_channel()
        group = user_group(self.user_id)
        failed = f"the sessions group of user {self.user_id} failed; the heartbeat reads them"
        try:
            await live_channel.join(self._layer, group, self._channel, failed)
        finally:
            self._due.set()
        self._tasks.append(asyncio.create_task(
            live_channel.stay_member(self._layer, group, self._channel, failed)))
        await live_channel.until_it_works(self._heard, failed)

    async def _heard(self) -> None:
        while True:
            try:
                message = await self._layer.receive(self._channel)
            except (TimeoutError, RedisTimeoutError):  # the layer's own wait may end
                continue
            if message.get("type") == ENDED:
                self._rename(message.get("renamed"))
                self._due.set()

    def _rename(self, renamed) -> None:
        if isinstance(renamed, list) and len(renamed) == 2 and all(isinstance(key, str) for key in renamed):
            for session in self._watches:
                if session.session_key == renamed[0]:
                    session.session_key = renamed[1]

    async def _keep(self) -> None:
        """Reads the sessions when told and every heartbeat. A session found gone is read once
        more, CONFIRM_SECONDS later, before its streams end: a password change deletes its own
        session's old key before the message naming the new one can arrive, and a read between
        the two (a heartbeat's, another session's sign-out) finds that session gone. One found
        with a stale hash ended for sure (a password change elsewhere): its streams end now."""
        read = on_database_thread(selectors.sessions_signed_in)
        while True:
            missing = any(session.missing for session in self._watches)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CONFIRM_SECONDS if missing else settings.CHAT_HEARTBEAT_SECONDS):
                    await self._due.wait()
            self._due.clear()
            watches = list(self._watches)
            try:
                stored = await read(user_id=self.user_id, session_keys={w.session_key for w in watches})
            except Exception:  # read again within a heartbeat
                log_failure(logger, "reading the sessions of user %s failed", self.user_id)
                continue
            for session in watches:
                if stored.get(session.session_key):
                    session.missing = False
                elif session.session_key in stored or session.missing:
                    session.end()  # its hash stale (a password change elsewhere), or gone twice
                else:
                    session.missing = True

    async def _leave(self, channel: str) -> None:
        try:
            await live_channel.leave(self._layer, user_group(self.user_id), channel)
        except Exception:
            logger.exception("leaving the sessions group of user %s failed", self.user_id)
