"""The relay: one answer, from the inference service to the browser.

It sends what is ready and never waits: the upstream's chunks are read ahead into a backlog
(chatapp/streaming/upstream_backlog.py), and everything waiting there leaves as one `delta` event, so a
relay that keeps up sends one event per chunk and one that falls behind sends fewer, larger
ones. The first delta always goes alone. Nothing waits for the database either (the partial
text is handed in at most once per interval to chatapp/streaming/partial_saves.py, which saves every
relay's together, in the background). The relay ends in exactly one
final write, whatever ends it: the upstream finishing or failing, a Stop from any process (the
channel layer), the time limit, the browser leaving for good, or the session that asked it
ending (a sign-out, a password change elsewhere: session_ends.py), whose stream then ends with
an `error` event `signed_out` in place of `done`. That write is shielded from
cancellation.

An answer outlives its page's connection: when the browser leaves (Django cancels us) without a
Stop, a task carries the answer on unattended, reading the upstream, for the page to resume
from any process (chatapp/streaming/watch.py, over its live_channel.py). It ends as a departed
client's, the upstream closed, once CHAT_RESUME_GRACE_SECONDS pass without a reader; an
upstream that ends meanwhile waits the same for a reader before the final write, so that a
Stop from the page still cuts the text to what its user saw.

The audit counts upstream chunks, not events (`num_chunks`, the token count when the upstream
sends no usage); the mean inter-token latency is the time from the first delta to the last
over the chunks after the first, and the longest is the longest wait between two deltas.
"""

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from django.conf import settings
from django.utils import timezone

from common.vocabulary import CancelledBy, GenerationStatus

from .. import services
from ..runtime import web_process
from ..runtime.database_outage import outlasting_an_outage
from ..runtime.database_threads import on_database_thread
from ..runtime.held_tasks import held_until_done
from ..runtime.to_the_end import to_the_end
from ..upstream import titles
from ..upstream.inference_client import UpstreamBroken, UpstreamStream
from . import live_channel, prompt_fit, session_ends, sse
from .live_channel import LivePublisher
from .partial_saves import partial_saves
from .relay_inbox import RelayInbox
from .text_proof import TextProof
from .upstream_backlog import UpstreamBacklog


class _Cut:
    """What ends an answer short, in place of the upstream's next chunk, and who cut it."""

    def __init__(self, cancelled_by: CancelledBy):
        self.cancelled_by = cancelled_by


_HEARTBEAT = object()
_STOP, _TIMEOUT, _NOBODY_BACK, _SHUTDOWN, _SIGNED_OUT = (_Cut(who) for who in (
    CancelledBy.USER, CancelledBy.TIMEOUT, CancelledBy.CLIENT_GONE, CancelledBy.SHUTDOWN, CancelledBy.SIGNED_OUT))


class Relay:
    def __init__(self, start: services.AnswerStart, upstream: UpstreamStream, started: float,
                 session_key: str | None = None):
        self.start = start
        self.session_key = session_key  # the session that asked: its end stops the answer
        self.generation = start.generation
        self.upstream = upstream
        self.started = started  # monotonic time the request arrived
        # Known at open: recorded however the answer ends, unless a final usage says otherwise.
        self.outcome = services.Outcome(prompt_tokens=upstream.prompt_tokens)
        self._sent: list[str] = []
        self._length = 0  # code points in self._sent: the offset of the next delta
        self._proof = TextProof(self.generation.pk)
        self._in_flight = None  # a delta taken for the page's connection, not yet out
        self._live = LivePublisher(self.generation.pk, lambda: partial_saves().saved_chars(self.generation.pk))
        self._left_at: float | None = None  # monotonic: when the page's connection went
        self._first_delta_at: float | None = None
        self._last_delta_at: float | None = None
        self._longest_gap = 0.0
        self._stop_asked = False
        self._shutdown_asked = False  # the web process is stopping: the answer ends now
        self._signed_out = False  # the session that asked ended (session_ends.py)
        self._wake = asyncio.Event()  # set by the backlog when something is ready, and by a Stop
        self._backlog: UpstreamBacklog | None = None
        self._last_save = started
        self._unsaved = False  # text went out since the last partial save
        self._handed_in = 0  # code points of the last text handed in to be saved
        self._told_saved = 0  # code points the page was told are stored
        self._first_delta_sent = asyncio.Event()
        self._inbox = RelayInbox(self.generation.pk, on_stop=self._ask_stop, on_reader=self._reader_announced,
                                 first_delta_sent=self._first_delta_sent)

    async def stream(self) -> AsyncIterator[bytes]:
        """The events, their generator already run to its first. Django drops a response whose
        head could not go out (the browser left meanwhile) unread, and a generator never started
        runs none of its code when it is closed or collected: the answer would stream for nobody
        until the reaper. Started, it is closed at its first yield, and ends as it does when a
        browser leaves later."""
        events = self.events()
        first = await anext(events)  # runs no await: no cancellation comes between
        return _beginning_with(first, events)

    async def events(self) -> AsyncIterator[bytes]:
        # From here every way out ends in _close_and_save.
        web_process.relay_began(self.generation.pk, on_shutdown=self._ask_shutdown)
        try:
            yield sse.event("start", {
                "message_id": self.start.message.pk, "generation_id": self.generation.pk,
                "request_id": str(self.generation.request_id), "model": self.generation.model,
                # Older messages were left out to fit the model's context: it reads from this one on.
                "context_from_message_id": self.generation.context_from_message_id,
                # The page ends a fetch that stays silent for two of these (a stalled connection).
                "heartbeat_s": settings.CHAT_HEARTBEAT_SECONDS,
                # How long the page may take to come back and resume the answer after losing it.
                "resume_grace_s": settings.CHAT_RESUME_GRACE_SECONDS,
            })
            async with contextlib.aclosing(self._upstream_items()) as items:
                async for item in items:
                    if item is _HEARTBEAT:
                        yield sse.HEARTBEAT
                    elif isinstance(item, _Cut):
                        self.outcome.cancelled_by = item.cancelled_by
                        break
                    else:
                        if item.text:
                            self._in_flight = item
                            yield sse.delta(item.text, self._proof.of(self._length, item.text), self._saved_news())
                            self._in_flight = None
                            self._sent_delta(item.text, item.chunks)  # once the event went out
                        self._ended_with(item)
        except UpstreamBroken as error:
            self.outcome.error_code, self.outcome.error_message = error.code, error.message
        except BaseException:
            # Cancelled (the browser left) or closed: carried on for the page to come back, or
            # (no grace) the rows finished; then it propagates.
            if settings.CHAT_RESUME_GRACE_SECONDS > 0 and self.outcome.cancelled_by is None:
                self._carry_on()
            else:
                self.outcome.cancelled_by = self.outcome.cancelled_by or (
                    CancelledBy.SHUTDOWN if self._shutdown_asked else CancelledBy.CLIENT_GONE)
                await self._finish()
            raise
        finishing = held_until_done(self._finish())  # the page leaving meanwhile does not stop it
        while not finishing.done():
            await asyncio.wait({finishing}, timeout=settings.CHAT_HEARTBEAT_SECONDS)
            if not finishing.done():  # the final write waits for the database: the page must
                yield sse.HEARTBEAT  # not take the quiet for a stalled connection
        generation = finishing.result()
        if self.outcome.cancelled_by == CancelledBy.SIGNED_OUT:
            yield sse.SIGNED_OUT  # not even how it ended: the session is no longer the user's
            return
        if not self.start.continue_final_message and generation.status in (
                GenerationStatus.COMPLETED, GenerationStatus.TRUNCATED):
            prompt_fit.answered(conversation_id=generation.conversation_id, model=generation.model,
                                text=generation.final_text, usage=self.outcome.usage,
                                finish_reason=generation.finish_reason)
        title_requested = self._title_asked(generation)
        if self.outcome.error_code and generation.status == GenerationStatus.FAILED:
            yield sse.event("error", {"code": self.outcome.error_code, "message": self.outcome.error_message})
        message = generation.message  # read with the final write
        yield sse.done(generation, message and message.status, title_requested=title_requested)

    def _ended_with(self, item) -> None:
        self.outcome.finish_reason = item.finish_reason or self.outcome.finish_reason
        self.outcome.usage = item.usage or self.outcome.usage

    def _title_asked(self, generation) -> bool:
        title_requested = self._first_answer_completed(generation)
        if title_requested:
            titles.request_title(self.generation.conversation_id)  # after the write, off the loop
        return title_requested

    def _carry_on(self) -> None:
        """The page's connection went: the answer goes on in a task of its own."""
        self._left_at = time.monotonic()
        if self._in_flight is not None:  # taken, never shown: the page gets it when it resumes
            item, self._in_flight = self._in_flight, None
            self._sent_delta(item.text, item.chunks)
            self._ended_with(item)
        held_until_done(self._unattended())

    async def _unattended(self) -> None:
        """The answer with its page gone: read on until it ends, a Stop, or nobody back in time.

        Readers from anywhere get its text over the live channel; the final write is the same.
        """
        try:
            async with contextlib.aclosing(self._upstream_items(unattended=True)) as items:
                async for item in items:
                    if isinstance(item, _Cut):
                        self.outcome.cancelled_by = item.cancelled_by
                        break
                    if item is not _HEARTBEAT:
                        if item.text:
                            self._sent_delta(item.text, item.chunks)
                        self._ended_with(item)
        except UpstreamBroken as error:
            self.outcome.error_code, self.outcome.error_message = error.code, error.message
        except BaseException:  # the process is stopping, or a fault of ours
            self.outcome.cancelled_by = CancelledBy.SHUTDOWN
            await self._finish()
            raise
        self._title_asked(await self._finish())

    def _first_answer_completed(self, generation) -> bool:
        """The answer to a conversation's only question ended well: the model may name it now.

        Read from the prompt, without a query: one question in it, and no continuation (the
        truncated answer it continues was titled already). The task checks the rows again.
        """
        questions = sum(message["role"] == "user" for message in self.start.prompt)
        return titles.asked_for(questions=questions, continued=self.start.continue_final_message,
                                status=generation.status)

    async def _upstream_items(self, unattended: bool = False):
        """What the upstream sent, taken as it is ready, or a heartbeat, a Stop, the time limit,
        and `unattended`, the grace period passing with nobody back.

        Nothing per chunk but taking it: the backlog's reader and the Stop helpers wake this
        loop through one event, which is waited for only when nothing is ready. Unattended, an
        upstream that ended waits for a reader (or the grace) before the loop ends.
        """
        helpers = self._inbox.listen(at_once=unattended)
        session = session_ends.watch(self.generation.user_id, self.session_key, self._ask_signed_out)
        if self._backlog is None:
            self._backlog = UpstreamBacklog(self.upstream.chunks(), self._wake.set)
        backlog = self._backlog
        deadline = self.started + settings.CHAT_GENERATION_TIMEOUT_SECONDS
        first = self._length == 0
        try:
            while True:
                if self._shutdown_asked:
                    yield _SHUTDOWN
                    return
                if self._stop_asked:
                    yield _STOP
                    return
                if self._signed_out:
                    yield _SIGNED_OUT
                    return
                if time.monotonic() >= deadline:
                    yield _TIMEOUT
                    return
                if unattended and self._nobody_back():
                    yield _NOBODY_BACK
                    return
                taken = backlog.take(alone=first)
                if taken is not None:
                    first = first and not taken.text
                    yield taken
                    continue
                if backlog.ended and not (unattended and not self._reader_back()):
                    return
                self._wake.clear()
                try:
                    async with asyncio.timeout(self._idle_wait(deadline, unattended)):
                        await self._wake.wait()
                except TimeoutError:
                    if self._unsaved and self._save_due(time.monotonic()):
                        # The upstream paused with text unsaved: saved now, not when it goes on
                        # (watchers read the rows). The heartbeat's wait starts again after it.
                        self._save_partial(time.monotonic())
                    elif time.monotonic() < deadline:
                        yield _HEARTBEAT
        finally:
            session.close()
            for task in helpers:
                task.cancel()

    def _reader_back(self) -> bool:
        """Someone read the answer since its page left (the page resumed, or another watches)."""
        seen = self._live.reader_seen_at
        return seen is not None and seen >= self._left_at

    def _nobody_back(self) -> bool:
        since = max(self._left_at, self._live.reader_seen_at or self._left_at)
        return not self._live.is_read_elsewhere() and time.monotonic() - since >= settings.CHAT_RESUME_GRACE_SECONDS

    def _ask_stop(self) -> None:
        self._stop_asked = True
        self._wake.set()

    def _ask_signed_out(self) -> None:
        self._signed_out = True
        self._wake.set()

    def _ask_shutdown(self) -> None:
        self._shutdown_asked = True
        self._wake.set()

    def _reader_announced(self, message: dict) -> None:
        self._live.reader(message, "".join(self._sent))
        self._wake.set()  # an unattended answer waiting for its reader may end now

    def _sent_delta(self, text: str, chunks: int) -> None:
        now = time.monotonic()
        if self._last_delta_at is None:
            self._first_delta_sent.set()
            self._first_delta_at = now
            self.outcome.first_token_at = timezone.now()
            self.outcome.ttft_ms = (now - self.started) * 1000
        else:
            self._longest_gap = max(self._longest_gap, now - self._last_delta_at)
        self._last_delta_at = now
        self._sent.append(text)
        self._live.delta(self._length, text)
        self._length += len(text)
        self.outcome.num_chunks += chunks
        if self._save_due(now):
            self._save_partial(now)
        else:
            self._unsaved = True

    def _saved_news(self) -> int | None:
        """How much of the text partial saves have stored, when more than the page was told."""
        if self._handed_in <= self._told_saved:
            return None  # nothing more was handed in: most deltas stop here
        saved = partial_saves().saved_chars(self.generation.pk)
        if saved <= self._told_saved:
            return None
        self._told_saved = saved
        return saved

    def _idle_wait(self, deadline: float, unattended: bool) -> float:
        """How long to wait for the upstream: until the heartbeat, the time limit, the save
        of text still unsaved, or (unattended) a check of whether anybody came back."""
        now = time.monotonic()
        wait = min(settings.CHAT_HEARTBEAT_SECONDS, deadline - now)
        if self._unsaved:
            wait = min(wait, self._last_save + settings.CHAT_SAVE_INTERVAL_SECONDS - now)
        if unattended:
            wait = min(wait, live_channel.presence_interval())
        return max(wait, 0)

    def _save_due(self, now: float) -> bool:
        return now - self._last_save >= settings.CHAT_SAVE_INTERVAL_SECONDS

    def _save_partial(self, now: float) -> None:
        self._last_save, self._unsaved, self._handed_in = now, False, self._length
        partial_saves().hand_in(services.PartialText(
            self.generation.pk, self.start.message.pk, self.start.message.content, "".join(self._sent)))

    async def _finish(self):
        """Closes the upstream (the engine frees the sequence) and writes the final rows."""
        self.outcome.text = "".join(self._sent)
        if self.outcome.num_chunks > 1:
            streamed = self._last_delta_at - self._first_delta_at
            self.outcome.itl_mean_ms = streamed / (self.outcome.num_chunks - 1) * 1000
            self.outcome.itl_max_ms = self._longest_gap * 1000
        return await to_the_end(self._close_and_save())  # cancelled meanwhile: written, then gone

    async def _close_and_save(self):
        try:
            if self._backlog is not None:
                await self._backlog.aclose()
            await self.upstream.aclose()
            await partial_saves().withdraw(self.generation.pk)  # no partial save lands after the final one
            finish = on_database_thread(services.generation_finish)
            generation = await outlasting_an_outage(
                lambda: finish(generation_id=self.generation.pk, outcome=self.outcome),
                f"the final write of generation {self.generation.pk}")
        finally:
            web_process.relay_ended(self.generation.pk)  # written, or left to the reaper
        self._live.end()  # its readers read the final rows
        return generation


async def _beginning_with(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    yield first
    async with contextlib.aclosing(rest):
        async for chunk in rest:
            yield chunk
