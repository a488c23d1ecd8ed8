"""The relay: one answer, from the inference service to the browser.

It sends what is ready and never waits: the upstream's chunks are read ahead into a backlog
(chatapp/streaming/upstream_backlog.py), and everything waiting there leaves as one `delta` event, so a
relay that keeps up sends one event per chunk and one that falls behind sends fewer, larger
ones. The first delta always goes alone. Nothing waits for the database either (the partial
text is handed in at most once per interval to chatapp/streaming/partial_saves.py, which saves every
relay's together, in the background). The relay ends in exactly one
final write, whatever ends it: the upstream finishing or failing, the browser leaving (Django
cancels us), a Stop from any process (the channel layer), or the time limit. That write is
shielded from cancellation.

The audit counts upstream chunks, not events (`num_chunks`, the token count when the upstream
sends no usage); the mean inter-token latency is the time from the first delta to the last
over the chunks after the first, and the longest is the longest wait between two deltas.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

from channels.layers import get_channel_layer
from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.utils import timezone
# redis-py's read timeout is its own class, not Python's TimeoutError.
from redis.exceptions import TimeoutError as RedisTimeoutError

from common.vocabulary import CancelledBy, GenerationStatus

from .. import selectors, services
from ..runtime.database_threads import on_database_thread
from ..runtime.to_the_end import to_the_end
from ..upstream import titles
from ..upstream.inference_client import UpstreamBroken, UpstreamStream
from . import sse
from .partial_saves import partial_saves
from .upstream_backlog import UpstreamBacklog

logger = logging.getLogger(__name__)

_HEARTBEAT, _STOP, _TIMEOUT = (object() for _ in range(3))


def stop_group(generation_id: int) -> str:
    return f"generation-stop-{generation_id}"


async def tell_relay_to_stop(generation_id: int) -> None:
    """After a Stop is recorded: the stream may be held by another daphne process, so tell
    them all at once. A failure is logged and no more: the row holds the Stop, and the relay's
    next heartbeat reads it."""
    try:
        await get_channel_layer().group_send(stop_group(generation_id), {"type": "generation.stop"})
    except Exception:
        logger.exception("telling the relay of generation %s to stop failed", generation_id)


class Relay:
    def __init__(self, start: services.AnswerStart, upstream: UpstreamStream, started: float):
        self.start = start
        self.generation = start.generation
        self.upstream = upstream
        self.started = started  # monotonic time the request arrived
        # Known at open: recorded however the answer ends, unless a final usage says otherwise.
        self.outcome = services.Outcome(prompt_tokens=upstream.prompt_tokens)
        self._sent: list[str] = []
        self._first_delta_at: float | None = None
        self._last_delta_at: float | None = None
        self._longest_gap = 0.0
        self._stop_asked = False
        self._wake = asyncio.Event()  # set by the backlog when something is ready, and by a Stop
        self._backlog: UpstreamBacklog | None = None
        self._last_save = started
        self._unsaved = False  # text went out since the last partial save
        self._first_delta_sent = asyncio.Event()

    async def events(self) -> AsyncIterator[bytes]:
        yield sse.event("start", {
            "message_id": self.start.message.pk, "generation_id": self.generation.pk,
            "request_id": str(self.generation.request_id), "model": self.generation.model,
            # The page ends a fetch that stays silent for two of these (a stalled connection).
            "heartbeat_s": settings.CHAT_HEARTBEAT_SECONDS,
        })
        try:
            async with contextlib.aclosing(self._upstream_items()) as items:
                async for item in items:
                    if item is _HEARTBEAT:
                        yield sse.HEARTBEAT
                    elif item is _STOP or item is _TIMEOUT:
                        self.outcome.cancelled_by = (CancelledBy.USER if item is _STOP
                                                     else CancelledBy.TIMEOUT)
                        break
                    else:
                        if item.text:
                            yield sse.delta(item.text)
                            self._sent_delta(item.text, item.chunks)  # once the event went out
                        self.outcome.finish_reason = item.finish_reason or self.outcome.finish_reason
                        self.outcome.usage = item.usage or self.outcome.usage
        except UpstreamBroken as error:
            self.outcome.error_code, self.outcome.error_message = error.code, error.message
        except BaseException:
            # Cancelled (the browser left) or closed: finish the rows, then let it propagate.
            self.outcome.cancelled_by = CancelledBy.CLIENT_GONE
            await self._finish()
            raise
        generation = await self._finish()
        title_requested = self._first_answer_completed(generation)
        if title_requested:
            titles.request_title(self.generation.conversation_id)  # after the write, off the loop
        if self.outcome.error_code and generation.status == GenerationStatus.FAILED:
            yield sse.event("error", {"code": self.outcome.error_code, "message": self.outcome.error_message})
        yield sse.done(generation, title_requested=title_requested)

    def _first_answer_completed(self, generation) -> bool:
        """The answer to a conversation's only question ended well: the model may name it now.

        Read from the prompt, without a query: one question in it, and no continuation (the
        truncated answer it continues was titled already). The task checks the rows again.
        """
        questions = sum(message["role"] == "user" for message in self.start.prompt)
        return titles.asked_for(questions=questions, continued=self.start.continue_final_message,
                                status=generation.status)

    async def _upstream_items(self):
        """What the upstream sent, taken as it is ready, or a heartbeat, a Stop, the time limit.

        Nothing per chunk but taking it: the backlog's reader and the Stop helpers wake this
        loop through one event, which is waited for only when nothing is ready.
        """
        helpers = [asyncio.create_task(work) for work in (
            self._listen_for_stop(), self._read_early_stop(), self._keep_alive())]
        self._backlog = backlog = UpstreamBacklog(self.upstream.chunks(), self._wake.set)
        deadline = self.started + settings.CHAT_GENERATION_TIMEOUT_SECONDS
        first = True
        try:
            while True:
                if self._stop_asked:
                    yield _STOP
                    return
                if time.monotonic() >= deadline:
                    yield _TIMEOUT
                    return
                taken = backlog.take(alone=first)
                if taken is not None:
                    first = first and not taken.text
                    yield taken
                    continue
                if backlog.ended:
                    return
                self._wake.clear()
                try:
                    async with asyncio.timeout(self._idle_wait(deadline)):
                        await self._wake.wait()
                except TimeoutError:
                    if self._unsaved and self._save_due(time.monotonic()):
                        # The upstream paused with text unsaved: saved now, not when it goes on
                        # (watchers read the rows). The heartbeat's wait starts again after it.
                        self._save_partial(time.monotonic())
                    elif time.monotonic() < deadline:
                        yield _HEARTBEAT
        finally:
            for task in helpers:
                task.cancel()

    def _ask_stop(self) -> None:
        self._stop_asked = True
        self._wake.set()

    async def _listen_for_stop(self) -> None:
        """A Stop may come from any process: it arrives over the channel layer.

        Only a stop message asks the relay to stop. A quiet channel is no Stop: the layer's
        receive may time out and is simply asked again. If the layer fails, the failure is logged
        and is no Stop either: the row is the record, and the heartbeat reads it (see _keep_alive).
        """
        try:
            await self._channel_says_stop()
        except Exception:
            logger.exception("the stop listener of generation %s failed; its heartbeat reads the row",
                             self.generation.pk)
            return
        self._ask_stop()

    async def _channel_says_stop(self) -> None:
        layer = get_channel_layer()
        channel = await layer.new_channel()
        group = stop_group(self.generation.pk)
        try:
            await layer.group_add(group, channel)
            while True:
                try:
                    message = await layer.receive(channel)
                except (TimeoutError, RedisTimeoutError):
                    continue  # nothing came within the layer's wait: not a Stop
                if message.get("type") == "generation.stop":
                    return
        finally:  # also when cancelled while joining: a member left behind lingers for a day
            await asyncio.shield(layer.group_discard(group, channel))

    async def _read_early_stop(self) -> None:
        """A Stop that came before we listened was sent to nobody; its row remembers it. The
        row is read once the first delta is out, so that the read does not delay it."""
        await self._first_delta_sent.wait()
        try:
            if await on_database_thread(selectors.stop_requested)(generation_id=self.generation.pk):
                self._ask_stop()
        except Exception:  # the heartbeat reads the row again within a beat
            logger.exception("reading the early Stop of generation %s failed", self.generation.pk)

    async def _keep_alive(self) -> None:
        """Proves the relay alive on its own timer, so a slow answer is never reaped as dead.

        The same write tells whether the row still says `streaming`: a Stop recorded there (its
        channel message lost, say) or an end decided elsewhere stops the stream within a beat.
        """
        heartbeat = on_database_thread(services.generation_heartbeat)
        while True:
            await asyncio.sleep(settings.CHAT_RELAY_HEARTBEAT_SECONDS)
            try:
                streaming = await heartbeat(generation_id=self.generation.pk)
            except Exception:  # a missed beat is not fatal; the reaper allows for several
                logger.exception("the heartbeat of generation %s failed", self.generation.pk)
                continue
            if not streaming:
                self._ask_stop()
                return

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
        self.outcome.num_chunks += chunks
        if self._save_due(now):
            self._save_partial(now)
        else:
            self._unsaved = True

    def _idle_wait(self, deadline: float) -> float:
        """How long to wait for the upstream: until the heartbeat, the time limit, or the save
        of text still unsaved, whichever comes first."""
        now = time.monotonic()
        wait = min(settings.CHAT_HEARTBEAT_SECONDS, deadline - now)
        if self._unsaved:
            wait = min(wait, self._last_save + settings.CHAT_SAVE_INTERVAL_SECONDS - now)
        return max(wait, 0)

    def _save_due(self, now: float) -> bool:
        return now - self._last_save >= settings.CHAT_SAVE_INTERVAL_SECONDS

    def _save_partial(self, now: float) -> None:
        self._last_save, self._unsaved = now, False
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
        if self._backlog is not None:
            await self._backlog.aclose()
        await self.upstream.aclose()
        await partial_saves().withdraw(self.generation.pk)  # no partial save lands after the final one
        finish = on_database_thread(services.generation_finish)
        try:
            return await finish(generation_id=self.generation.pk, outcome=self.outcome)
        except (InterfaceError, OperationalError):
            # A connection the database dropped (a restart) fails the first call made on it and
            # is replaced after it; the answer the user saw must not be lost to that. A retry is
            # safe: a write that did commit is final, and the second one is then dropped.
            logger.warning("the final write of generation %s met a dropped connection; once more",
                           self.generation.pk)
            return await finish(generation_id=self.generation.pk, outcome=self.outcome)
