"""The watch stream: an answer followed live by another page, or resumed by its own, whichever
process holds it.

It joins the answer's hub in this process first (live_hub.py: one subscription to the answer's
live channel for all of the process's watchers), then reads the rows once for what came before;
their text joins the hub's, which the relay keeps growing. The stream is a cursor into that
text: woken when it grows, it sends what came since its last event as one delta (as the relay's
backlog does), so a watcher that falls behind sends fewer, larger events. Nothing reads the
database for a watcher while the channel delivers; the hub reads the rows for all of them when
the channel is quiet, a gap stays open, or the answer ended. A watcher's Stop goes through the
stop endpoint.

Events of a watch: `prefix` (the text saved so far), `delta` (only the new characters, as the
relay's), then the relay's own `done` once the row is final (saying `title_requested` as the
relay's does when this watch saw the answer end). A resume (`from`, the characters of this
generation the page holds) starts with `resume` instead, and its deltas go on from that offset.
A Stop cuts the answer to what the stopping page saw, which may be less than this one was sent:
then a `prefix` carries the whole final text, to replace what is shown. Once the watching
session ends (a sign-out, a password change elsewhere: session_ends.py) the stream ends with
sse.SIGNED_OUT in place of `done`, and the answer goes on for the user's other sessions.
"""

import asyncio
import time
from collections.abc import AsyncIterator

from django.conf import settings

from .. import selectors
from ..models import Generation
from ..runtime.database_threads import on_database_thread
from . import live_hub, session_ends, sse
from .text_proof import TextProof
from .live_hub import LiveHub


async def events(generation: Generation, offset: int | None = None,
                 session_key: str | None = None) -> AsyncIterator[bytes]:
    """Ends after `done`, when the browser leaves (Django cancels us, mostly mid-wait), or once
    the watching session `session_key` ended (session_ends.py), with sse.SIGNED_OUT."""
    async with live_hub.joined(generation.pk) as hub:  # before the rows are read: nothing falls between
        following = Watch(generation.pk, hub)
        session = session_ends.watch(generation.user_id, session_key, following.session_ended)
        try:
            async for event in following.events(offset):
                yield event
        finally:
            session.close()


class Watch:
    """One watch or resume stream: how much of the answer's own text it has sent."""

    def __init__(self, generation_id: int, hub: LiveHub):
        self.generation_id, self.hub = generation_id, hub
        self.read = on_database_thread(selectors.generation_progress)
        self.sent = 0  # characters of this generation's own text the page holds
        self.told_stored = 0  # of those, how many the page was told the rows hold
        self.proof = TextProof(generation_id)
        self.signed_out = False  # its session ended: nothing more goes to it

    async def events(self, offset: int | None) -> AsyncIterator[bytes]:
        progress = await self.read(generation_id=self.generation_id)
        if offset is None or (progress.ended and progress.own_length < offset):
            yield _prefix(progress)  # a watch, or a resume past a Stop's cut: the whole text
            self.sent = progress.own_length
        else:
            yield _resume(progress, offset)
            self.sent = offset
        self.told_stored = progress.own_length
        if progress.ended:  # an answer ended before is no news of a title
            if new := progress.text_after[progress.text_length - progress.own_length + self.sent:]:
                yield self._delta(new)
            yield sse.done(progress.generation, progress.message_status, title_requested=False)
            return
        self.hub.heard_rows(progress)
        async for event in self._live():
            yield event
        if self.signed_out:
            yield sse.SIGNED_OUT
            return
        final = self.hub.final
        # Cut by a Stop to less than we sent, or stored short of it (its relay died between two
        # saves, and the page may hand back what it holds: text_proof.py): the whole text.
        if final.progress.own_length < self.sent:
            yield _prefix(final.progress)
        elif new := self.hub.text.after(self.sent):
            yield self._delta(new)
        yield sse.done(final.progress.generation, final.progress.message_status,
                       title_requested=final.title_requested)

    def session_ended(self) -> None:
        self.signed_out = True
        self.hub.wake()  # its other watchers look, find nothing new, and wait again

    def _delta(self, new: str) -> bytes:
        """The characters after those the page holds, proven at their offset; now it holds them.
        It says how much of what the page holds is stored, when the hub heard of more."""
        proof = self.proof.of(self.sent, new)
        self.sent += len(new)
        stored = min(self.hub.stored, self.sent)
        if stored <= self.told_stored:
            return sse.delta(new, proof)
        self.told_stored = stored
        return sse.delta(new, proof, stored)

    async def _live(self) -> AsyncIterator[bytes]:
        """What the hub's text gained since the last event, until the answer's final rows are in
        (or a heartbeat while nothing came)."""
        last_sent = time.monotonic()
        while self.hub.final is None and not self.signed_out:
            changed = self.hub.changed
            if new := self.hub.text.after(self.sent):
                yield self._delta(new)
                last_sent = time.monotonic()
                continue
            try:
                async with asyncio.timeout(max(last_sent + settings.CHAT_HEARTBEAT_SECONDS - time.monotonic(), 0)):
                    await changed.wait()
            except TimeoutError:
                yield sse.HEARTBEAT
                last_sent = time.monotonic()


def _prefix(progress: selectors.Progress) -> bytes:
    generation = progress.generation
    return sse.event("prefix", {"generation_id": generation.pk, "message_id": generation.message_id,
                                "status": generation.status, "text": progress.text_after,
                                # The text's first characters that came before this generation (a
                                # continued answer's): a Stop's seen_chars does not count them.
                                "earlier_chars": progress.text_length - progress.own_length,
                                # As the answer's `start`: two of these silent is a stalled watch,
                                # and a lost watch may resume within the grace period.
                                "heartbeat_s": settings.CHAT_HEARTBEAT_SECONDS,
                                "resume_grace_s": settings.CHAT_RESUME_GRACE_SECONDS})


def _resume(progress: selectors.Progress, offset: int) -> bytes:
    generation = progress.generation
    return sse.event("resume", {"generation_id": generation.pk, "message_id": generation.message_id,
                                "status": generation.status,
                                # The deltas that follow go on from this character of the
                                # generation's own text: the one the page asked from.
                                "offset": offset, "earlier_chars": progress.text_length - progress.own_length,
                                # How much of its own text is stored: less than the page holds
                                # when the relay died between two saves, and the page may hand
                                # back the rest (text_proof.py) before the reaper ends the answer.
                                "stored_chars": progress.own_length,
                                "heartbeat_s": settings.CHAT_HEARTBEAT_SECONDS,
                                "resume_grace_s": settings.CHAT_RESUME_GRACE_SECONDS})
