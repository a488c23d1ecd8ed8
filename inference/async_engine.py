"""The coordination layer: many asyncio streams over one engine stepped by one thread.

Each request has its own `asyncio.Queue`, fed from the step thread: all outputs of a step reach an
event loop in one `call_soon_threadsafe`, so a step wakes each loop once however many streams it
advanced. New and aborted requests are handed to the step thread through thread-safe inboxes and
applied at the top of each step, so only that thread touches the engine. The thread sleeps on an
event when there is nothing to do (no polling). A stream whose consumer goes away (cancelled,
closed) before the end reached it aborts its request in `finally`, which frees its cache before the
next step, and counts as cancelled even where the engine had just finished it: an answer whose end
nobody received was not delivered. The engine knows each request by a key of this layer's own,
never by the caller's id alone: a caller may open a request under an id whose previous request
is still leaving the engine (a client retrying under its tracing id), and that request's outputs,
or its prompt still in the inbox, must not reach the new stream; two requests open at once under
one id are two requests. A request the engine ended alone after an error receives that error; the
others go on. If a step raises (the engine could step no sequence at all), the loop stops, every
open stream receives the error at once, the engine reports itself unhealthy, and `on_death` is
told (the service's process then ends, for its supervisor to start a fresh one).
"""

import asyncio
import itertools
import logging
import threading
from collections import deque
from dataclasses import dataclass

from .engine import EngineStats, LLMEngine, RequestOutput, SamplingParams

logger = logging.getLogger(__name__)


class EngineUnavailable(RuntimeError):
    """The step loop is not running (not started yet, stopped, or dead after an error)."""


class QueueFull(RuntimeError):
    """Too many requests are waiting already."""


class RequestFailed(RuntimeError):
    """The engine ended this request alone after an error; the others go on."""


def caller_id(key: str) -> str:
    """The id the caller opened a request under, from the engine's key for it (a key of a
    request given to the engine directly, without this layer, is its own id)."""
    opened_as, serial_mark, _ = key.rpartition("#")
    return opened_as if serial_mark else key


@dataclass
class _Stream:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue


def _deliver(items: list[tuple[_Stream, object]]) -> None:
    """Puts each item on its stream's queue, with one wake-up per event loop for all of them."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Queue, object]]] = {}
    for stream, item in items:
        by_loop.setdefault(stream.loop, []).append((stream.queue, item))
    for loop, batch in by_loop.items():
        loop.call_soon_threadsafe(_put_all, batch)


def _put_all(batch: list[tuple[asyncio.Queue, object]]) -> None:
    for queue, item in batch:
        queue.put_nowait(item)


class AsyncEngine:
    def __init__(self, engine: LLMEngine, max_waiting: int, on_cancel=None, on_death=None):
        """`on_cancel(request_id)` runs on the step thread for each request whose consumer left
        before its end, once the engine holds nothing of it; `on_death()` runs there once, if
        the loop dies after an error, when every open stream has been handed that error."""
        self.engine = engine
        self.max_waiting = max_waiting
        self._on_cancel = on_cancel or (lambda request_id: None)
        self._on_death = on_death or (lambda: None)
        self._streams: dict[str, _Stream] = {}  # by engine key
        self._serial = itertools.count()
        self._new: deque[tuple[str, list[int], SamplingParams]] = deque()
        self._aborted: deque[str] = deque()
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self._stats = engine.stats()

    def stats(self) -> EngineStats:
        """The engine's state after its latest step, from any thread without waiting for it.

        The step thread reads it between steps: read from another thread, the cache's counts
        could meet a row half moved.
        """
        return self._stats

    # --- life ---
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="engine-step-loop", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ends the loop; open streams receive EngineUnavailable."""
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    @property
    def healthy(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self.error is None

    # --- streams ---
    def open(self, request_id: str, prompt_token_ids: list[int],
             params: SamplingParams) -> "RequestStream":
        """Queues a request and returns its stream; refuses at once when it cannot be taken.

        The caller must `close()` the stream (finished or not): closing early aborts the request.
        """
        self._check_can_accept()
        # The caller's id stays readable in the engine's logs (`caller_id`).
        key = f"{request_id}#{next(self._serial)}"
        stream = _Stream(asyncio.get_running_loop(), asyncio.Queue())
        self._streams[key] = stream
        self._new.append((key, prompt_token_ids, params))
        self._wake.set()
        return RequestStream(self, key, stream.queue)

    def _release(self, key: str, abort: bool) -> None:
        self._streams.pop(key, None)
        if abort:
            self._aborted.append(key)
            self._wake.set()

    def _check_can_accept(self) -> None:
        if not self.healthy:
            raise EngineUnavailable(self._unavailable_reason())
        if len(self._new) + self.engine.num_waiting >= self.max_waiting:
            raise QueueFull(f"{self.max_waiting} requests are waiting already")

    def _unavailable_reason(self) -> str:
        if self.error is not None:
            return f"the engine stopped after an error: {self.error!r}"
        return "the engine is not running"

    # --- the step thread ---
    def _loop(self) -> None:
        try:
            while not self._stopping:
                self._wake.clear()
                self._take_inbox()
                if not self.engine.has_work():
                    self._stats = self.engine.stats()
                    self._wake.wait()
                    continue
                outputs = self.engine.step()
                self._stats = self.engine.stats()  # before the outputs: a finished stream is counted out
                delivered = []
                for output in outputs:
                    # A stream may close on its event loop at any moment: look it up once.
                    stream = self._streams.get(output.request_id)
                    if stream is not None:
                        delivered.append((stream, output if output.error is None else RequestFailed(output.error)))
                _deliver(delivered)
        except BaseException as error:  # the loop must never die silently
            logger.exception("engine step loop failed")
            self.error = error
        finally:
            self.engine.abort_all()
            failure = EngineUnavailable(self._unavailable_reason())
            _deliver([(stream, failure) for stream in list(self._streams.values())])
            self._stats = self.engine.stats()
            if self.error is not None:
                self._on_death()

    def _take_inbox(self) -> None:
        refused: list[tuple[_Stream, object]] = []
        while self._aborted:
            key = self._aborted.popleft()
            # Not found: the engine had finished it (its end still queued, unread) or it had not
            # arrived yet (its entry in `_new` is skipped below). Its client left all the same.
            self.engine.abort_request(key)
            self._on_cancel(caller_id(key))
        while self._new:
            key, prompt_token_ids, params = self._new.popleft()
            stream = self._streams.get(key)
            if stream is None:
                continue  # its client left before it reached the engine
            try:
                self.engine.add_request(key, prompt_token_ids, params)
            except ValueError as error:  # it does not fit: said as the engine says it
                refused.append((stream, error))
            except Exception as error:  # only this request is at fault
                logger.exception("adding request %s failed", key)
                refused.append((stream, RequestFailed(f"{type(error).__name__}: {error}")))
        _deliver(refused)


class RequestStream:
    """One request's outputs, in order, ending after the finished one."""

    def __init__(self, engine: AsyncEngine, key: str, queue: asyncio.Queue):
        self.key = key  # the engine's
        self._engine = engine
        self._queue = queue
        self._done = False  # the engine holds nothing more of this request
        self._closed = False
        self._held_error: BaseException | None = None  # met by `ready`, raised by `__anext__`

    def __aiter__(self) -> "RequestStream":
        return self

    async def __anext__(self) -> RequestOutput:
        if self._done:
            raise StopAsyncIteration
        if self._held_error is not None:
            item, self._held_error = self._held_error, None
        else:
            item = await self._queue.get()
        return self._take(item)

    def ready(self) -> list[RequestOutput]:
        """The outputs queued already, without waiting, up to the finished one.

        An error queued behind them stops the list; the next `__anext__` raises it, so that
        the outputs before it are handled first, as they would be one by one.
        """
        outputs = []
        while not self._done and self._held_error is None and not self._queue.empty():
            item = self._queue.get_nowait()
            if isinstance(item, BaseException):
                self._held_error = item
            else:
                outputs.append(self._take(item))
        return outputs

    def _take(self, item) -> RequestOutput:
        if isinstance(item, BaseException):
            self._done = True  # the loop dropped it already
            raise item
        self._done = item.finished
        return item

    def close(self) -> None:
        """Idempotent; aborts the request in the engine unless it already finished."""
        if not self._closed:
            self._closed = True
            self._engine._release(self.key, abort=not self._done)
